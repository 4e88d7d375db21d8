/* kiln predict: a saved model's predicted classes, with their probabilities,
 * for the first test images of a dataset or for the images of an IDX file;
 * or, for scripts, its logits, probabilities or classes as CSV or JSON
 * (predict_output.c). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "commands.h"
#include "common.h"
#include "idx.h"
#include "predict_output.h"
#include "spec_help.h"

#define DEFAULT_COUNT 10

/* Fashion-MNIST's names for 10-class models (the default dataset's); other
 * models' classes are shown by number. */
static void class_name(int64_t label, int64_t classes, char *buf, size_t size) {
  if (classes == 10 && label >= 0 && label < 10)
    snprintf(buf, size, "%lld %s", (long long)label, fashion_mnist_classes[label]);
  else
    snprintf(buf, size, "%lld", (long long)label);
}

/* Prints one line per row of probs [count, classes]; labels may be NULL. */
static void print_predictions(const float *probs, const int64_t *labels, int64_t count, int64_t classes) {
  int64_t correct = 0;
  for (int64_t i = 0; i < count; i++) {
    const float *p = probs + i * classes;
    int64_t best = 0;
    for (int64_t c = 1; c < classes; c++)
      if (p[c] > p[best]) best = c;
    char predicted[64];
    class_name(best, classes, predicted, sizeof predicted);
    printf("%6lld  %-16s %6.2f%%", (long long)i, predicted, 100.0 * p[best]);
    if (labels) {
      char actual[64];
      class_name(labels[i], classes, actual, sizeof actual);
      printf("  actual %s%s", actual, labels[i] == best ? "" : "  (wrong)");
      correct += labels[i] == best;
    }
    printf("\n");
  }
  if (labels) printf("correct: %lld of %lld\n", (long long)correct, (long long)count);
}

/* --output/--format: kind of x's rows written as format on stdout. */
static int write_machine_readable(const cli_command *cmd, kiln_model *model, const kiln_tensor *x, int64_t count,
                                  int64_t classes, const int64_t *labels, kiln_predict_kind kind,
                                  predict_format format) {
  kiln_device cpu = {KILN_DEVICE_CPU, -1};
  kiln_tensor *out = NULL, *host = NULL, *f64 = NULL;
  kiln_dtype dtype = KILN_F32;
  predict_rows rows = {kind, count, classes, NULL, NULL, labels, 9};
  const int64_t n = kind == KILN_PREDICT_CLASSES ? count : count * classes;
  void *buffer = malloc((size_t)(n > 0 ? n : 1) * 8); /* doubles or i64 classes */
  kiln_status st = buffer ? kiln_model_predict(model, x, kind, &out) : KILN_ERROR_OUT_OF_MEMORY;
  if (st == KILN_OK) st = kiln_tensor_to(out, cpu, &host);
  if (st == KILN_OK) st = kiln_tensor_dtype(host, &dtype);
  if (st == KILN_OK && kind == KILN_PREDICT_CLASSES) {
    st = kiln_tensor_copy_to_host(host, buffer, n * 8);
    rows.classes = buffer;
  } else if (st == KILN_OK) {
    st = kiln_tensor_cast(host, KILN_F64, &f64);
    if (st == KILN_OK) st = kiln_tensor_copy_to_host(f64, buffer, n * 8);
    rows.values = buffer;
    rows.digits = dtype == KILN_F64 ? 17 : 9; /* each value read back exactly */
  }
  kiln_tensor_release(f64);
  kiln_tensor_release(host);
  kiln_tensor_release(out);
  if (st == KILN_OK) {
    if (format == PREDICT_CSV)
      predict_write_csv(stdout, &rows);
    else
      predict_write_json(stdout, &rows);
  }
  free(buffer);
  return st == KILN_OK ? CLI_CONTINUE : report_error(cmd, "prediction failed");
}

/* x [count, features] (any device) -> probabilities as host floats. */
static int predict(const cli_command *cmd, kiln_model *model, const kiln_tensor *x, int64_t count, int64_t classes,
                   float **out) {
  kiln_device cpu = {KILN_DEVICE_CPU, -1};
  kiln_tensor *probs = NULL, *host = NULL, *f32 = NULL;
  *out = malloc((size_t)(count * classes) * sizeof **out);
  kiln_status st = *out ? kiln_model_predict(model, x, KILN_PREDICT_PROBABILITIES, &probs) : KILN_ERROR_OUT_OF_MEMORY;
  if (st == KILN_OK) st = kiln_tensor_to(probs, cpu, &host);
  if (st == KILN_OK) st = kiln_tensor_cast(host, KILN_F32, &f32);
  if (st == KILN_OK) st = kiln_tensor_copy_to_host(f32, *out, count * classes * (int64_t)sizeof **out);
  kiln_tensor_release(f32);
  kiln_tensor_release(host);
  kiln_tensor_release(probs);
  if (st == KILN_OK) return CLI_CONTINUE;
  free(*out);
  *out = NULL;
  return report_error(cmd, "prediction failed");
}

int cmd_predict(int argc, char **argv) {
  const char *data = DEFAULT_DATA_DIR, *device = "auto", *spec = NULL, *input = NULL, *output = NULL,
             *format_name = "table";
  /* Not given: no count a user can type but the most negative int64,
   * which is refused as -1 is. */
  const int64_t kCountNotGiven = INT64_MIN;
  int64_t count = kCountNotGiven;
  const cli_option options[] = {
      {"data", CLI_STRING, &data, "DIR", "MNIST-layout dataset whose test images to classify (default " DEFAULT_DATA_DIR ")"},
      {"input", CLI_STRING, &input, "FILE", "classify the images of this IDX file (raw or .gz) instead"},
      {"count", CLI_INT, &count, "N", "how many images (default 10, or all of --input)"},
      {"device", CLI_STRING, &device, "DEV", "auto, cpu or cuda:N (default auto)"},
      {"spec", CLI_STRING, &spec, "SPEC",
       "read MODEL as a PyTorch state_dict of this MLP (e.g. 784-32-10; specs above)"},
      {"format", CLI_STRING, &format_name, "FMT",
       "table (default: class, probability, true class), or csv or json for scripts"},
      {"output", CLI_STRING, &output, "WHAT",
       "with --format csv|json: logits, probabilities or classes (default classes)"},
  };
  cli_command cmd = {
      .name = "predict",
      .synopsis = "MODEL",
      .summary = "Prints MODEL's predicted class and its probability for each image (and the true\n"
                 "class when the images come from a dataset's test split). MODEL is a file written by\n"
                 "'kiln train --save', or with --spec a state_dict saved from PyTorch (safetensors or\n"
                 "torch.save). With --format csv or json it prints --output for every image instead,\n"
                 "a row each, with the true classes (\"label\") when they are known.\n"
                 "\n" KILN_SPEC_GRAMMAR_HELP,
      .options = options,
      .num_options = (int)(sizeof options / sizeof options[0]),
      .min_positionals = 1,
      .max_positionals = 1,
  };
  int rc = cli_parse(&cmd, argc, argv);
  if (rc != CLI_CONTINUE) return rc;
  if (count != kCountNotGiven && count < 1) return cli_usage_error(&cmd, "--count must be at least 1");
  predict_format format = PREDICT_TABLE;
  kiln_predict_kind kind = KILN_PREDICT_CLASSES;
  if (!predict_format_from_name(format_name, &format))
    return cli_usage_error(&cmd, "unknown --format '%s' (table, csv or json)", format_name);
  if (output && !predict_kind_from_name(output, &kind))
    return cli_usage_error(&cmd, "unknown --output '%s' (logits, probabilities or classes)", output);
  if (output && format == PREDICT_TABLE) return cli_usage_error(&cmd, "--output needs --format csv or json");
  const char *path = cmd.positionals[0];

  kiln_context *ctx = NULL;
  kiln_device dev;
  kiln_model *model = NULL;
  kiln_dataset *test = NULL;
  kiln_tensor *x = NULL, *x_all = NULL, *y = NULL;
  int64_t *labels = NULL, classes = 0, available = 0;
  float *probs = NULL;
  rc = open_context(&cmd, device, 0, 0, &ctx, &dev);
  if (rc == CLI_CONTINUE) rc = load_model_file(&cmd, ctx, path, spec, dev, &model);
  if (rc == CLI_CONTINUE && kiln_model_output_size(model, &classes) != KILN_OK)
    rc = report_error(&cmd, "cannot read the model's output size");
  kiln_device cpu = {KILN_DEVICE_CPU, -1};
  if (rc == CLI_CONTINUE && input) {
    char err[512];
    if (idx_read_images(ctx, input, &x_all, err, sizeof err) != 0) {
      fprintf(stderr, "kiln predict: %s\n", err);
      rc = EXIT_RUNTIME_ERROR;
    } else {
      if (kiln_tensor_dim(x_all, 0, &available) != KILN_OK) available = 0;
      count = count == kCountNotGiven || count > available ? available : count;
      if (kiln_tensor_rows(x_all, 0, count, &x) != KILN_OK) rc = report_error(&cmd, "cannot select the images");
    }
  } else if (rc == CLI_CONTINUE) {
    rc = load_split(&cmd, ctx, data, "test", &test);
    if (rc == CLI_CONTINUE) {
      if (kiln_dataset_size(test, &available) != KILN_OK) available = 0;
      count = count == kCountNotGiven ? DEFAULT_COUNT : count;
      count = count > available ? available : count;
      labels = malloc((size_t)count * sizeof *labels);
      if (!labels || kiln_dataset_batch(test, 0, count, cpu, &x, &y) != KILN_OK ||
          kiln_tensor_copy_to_host(y, labels, count * (int64_t)sizeof *labels) != KILN_OK)
        rc = report_error(&cmd, "cannot read the test images");
    }
  }
  if (rc == CLI_CONTINUE && format != PREDICT_TABLE) {
    rc = write_machine_readable(&cmd, model, x, count, classes, labels, kind, format);
    if (rc == CLI_CONTINUE) rc = 0;
  }
  if (rc == CLI_CONTINUE) rc = predict(&cmd, model, x, count, classes, &probs);
  if (rc == CLI_CONTINUE) {
    print_predictions(probs, labels, count, classes);
    rc = 0;
  }
  free(probs);
  free(labels);
  kiln_tensor_release(y);
  kiln_tensor_release(x);
  kiln_tensor_release(x_all);
  kiln_dataset_release(test);
  kiln_model_release(model);
  kiln_context_release(ctx);
  return rc;
}
