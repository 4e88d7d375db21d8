#include "common.h"

#include <stdio.h>
#include <string.h>

const char *const fashion_mnist_classes[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                               "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

int report_error(const cli_command *cmd, const char *what) {
  if (what) fprintf(stderr, "kiln %s: %s: %s\n", cmd->name, what, kiln_last_error());
  else fprintf(stderr, "kiln %s: %s\n", cmd->name, kiln_last_error());
  return EXIT_RUNTIME_ERROR;
}

int open_context(const cli_command *cmd, const char *device_text, uint64_t seed, int64_t threads,
                 kiln_context **ctx, kiln_device *device) {
  *ctx = NULL;
  /* Check the syntax before creating anything, so that "--device gpu" is a
   * usage error and "--device cpu" can skip loading the CUDA plugin. */
  kiln_device wanted = {KILN_DEVICE_CPU, -1};
  int is_auto = strcmp(device_text, "auto") == 0;
  if (!is_auto && kiln_device_parse(NULL, device_text, &wanted) != KILN_OK)
    return cli_usage_error(cmd, "bad --device '%s': %s", device_text, kiln_last_error());

  kiln_context_options *options = NULL;
  if (kiln_context_options_create(&options) != KILN_OK) return report_error(cmd, "cannot create context options");
  kiln_status st = kiln_context_options_set_seed(options, seed);
  if (st == KILN_OK && kiln_context_options_set_num_threads(options, threads) != KILN_OK) {
    kiln_context_options_release(options);
    return cli_usage_error(cmd, "bad --threads %lld: %s", (long long)threads, kiln_last_error());
  }
  if (st == KILN_OK && !is_auto && wanted.kind == KILN_DEVICE_CPU)
    st = kiln_context_options_set_enable_cuda(options, 0);
  if (st == KILN_OK) st = kiln_context_create(options, ctx);
  kiln_context_options_release(options);
  if (st != KILN_OK) return report_error(cmd, "cannot create a kiln context");

  if (kiln_device_parse(*ctx, device_text, device) != KILN_OK) {
    fprintf(stderr, "kiln %s: device %s is not usable: %s\n", cmd->name, device_text, kiln_last_error());
    kiln_context_release(*ctx);
    *ctx = NULL;
    return EXIT_RUNTIME_ERROR;
  }
  return CLI_CONTINUE;
}

int load_split(const cli_command *cmd, kiln_context *ctx, const char *dir, const char *split, kiln_dataset **out) {
  kiln_status st = kiln_dataset_load_mnist(ctx, dir, split, out);
  if (st == KILN_OK) return CLI_CONTINUE;
  if (st == KILN_ERROR_IO) {
    const char *prefix = strcmp(split, "train") == 0 ? "train" : "t10k";
    fprintf(stderr,
            "kiln %s: cannot read the %s split in '%s': looked for %s-images-idx3-ubyte[.gz] and "
            "%s-labels-idx1-ubyte[.gz] (%s); install Fashion-MNIST with "
            "'apt-get install dataset-fashion-mnist' or pass --data DIR\n",
            cmd->name, split, dir, prefix, prefix, kiln_last_error());
    return EXIT_RUNTIME_ERROR;
  }
  char what[512];
  snprintf(what, sizeof what, "cannot load the %s split in '%s'", split, dir);
  return report_error(cmd, what);
}

int load_model_file(const cli_command *cmd, kiln_context *ctx, const char *path, const char *spec_text,
                    kiln_device device, kiln_model **out) {
  *out = NULL;
  char what[512];
  snprintf(what, sizeof what, "cannot load model '%s'", path);
  if (!spec_text) return kiln_model_load(ctx, path, device, out) == KILN_OK ? CLI_CONTINUE : report_error(cmd, what);
  kiln_model_spec *spec = NULL;
  if (kiln_model_spec_create(&spec) != KILN_OK) return report_error(cmd, "cannot create a model spec");
  int rc = CLI_CONTINUE;
  if (kiln_model_spec_parse(spec, spec_text) != KILN_OK)
    rc = cli_usage_error(cmd, "bad --spec '%s': %s", spec_text, kiln_last_error());
  else if (kiln_model_load_with_spec(ctx, path, spec, device, out) != KILN_OK) {
    snprintf(what, sizeof what, "cannot load model '%s' as %s", path, spec_text);
    rc = report_error(cmd, what);
  }
  kiln_model_spec_release(spec);
  return rc;
}

void describe_device(kiln_context *ctx, kiln_device device, char *buf, size_t size) {
  char id[32] = "?";
  if (kiln_device_format(device, id, sizeof id) != KILN_OK) snprintf(id, sizeof id, "?");
  kiln_device_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  if (kiln_device_get_info(ctx, device, &info) != KILN_OK) {
    snprintf(buf, size, "%s", id);
  } else if (device.kind == KILN_DEVICE_CPU) {
    snprintf(buf, size, "%s (%s, %lld threads)", id, info.name, (long long)info.threads);
  } else {
    snprintf(buf, size, "%s (%s)", id, info.name);
  }
}
