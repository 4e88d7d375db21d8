#include "predict_output.h"

#include <math.h>
#include <string.h>

static const char *const KIND_NAMES[] = {"logits", "probabilities", "classes"};
static const char *const FORMAT_NAMES[] = {"table", "csv", "json"};

int predict_kind_from_name(const char *name, kiln_predict_kind *out) {
  for (int i = 0; i < 3; i++)
    if (strcmp(name, KIND_NAMES[i]) == 0) {
      *out = (kiln_predict_kind)i;
      return 1;
    }
  return 0;
}

int predict_format_from_name(const char *name, predict_format *out) {
  for (int i = 0; i < 3; i++)
    if (strcmp(name, FORMAT_NAMES[i]) == 0) {
      *out = (predict_format)i;
      return 1;
    }
  return 0;
}

/* One number as CSV or JSON writes it ("null" in JSON for nan and inf,
 * which JSON cannot spell). */
static void write_number(FILE *out, double v, int digits, int json) {
  if (json && !isfinite(v))
    fputs("null", out);
  else
    fprintf(out, "%.*g", digits, v);
}

void predict_write_csv(FILE *out, const predict_rows *rows) {
  fputs(rows->kind == KILN_PREDICT_CLASSES ? "index,class" : "index", out);
  const char *column = rows->kind == KILN_PREDICT_LOGITS ? "logit" : "probability";
  for (int64_t c = 0; rows->kind != KILN_PREDICT_CLASSES && c < rows->width; c++)
    fprintf(out, ",%s_%lld", column, (long long)c);
  fputs(rows->labels ? ",label\n" : "\n", out);
  for (int64_t i = 0; i < rows->count; i++) {
    fprintf(out, "%lld", (long long)i);
    if (rows->kind == KILN_PREDICT_CLASSES) {
      fprintf(out, ",%lld", (long long)rows->classes[i]);
    } else {
      for (int64_t c = 0; c < rows->width; c++) {
        fputc(',', out);
        write_number(out, rows->values[i * rows->width + c], rows->digits, 0);
      }
    }
    if (rows->labels) fprintf(out, ",%lld", (long long)rows->labels[i]);
    fputc('\n', out);
  }
}

void predict_write_json(FILE *out, const predict_rows *rows) {
  fprintf(out, "{\"output\": \"%s\", \"count\": %lld, \"width\": %lld, \"values\": [", KIND_NAMES[rows->kind],
          (long long)rows->count, (long long)rows->width);
  for (int64_t i = 0; i < rows->count; i++) {
    if (i) fputs(", ", out);
    if (rows->kind == KILN_PREDICT_CLASSES) {
      fprintf(out, "%lld", (long long)rows->classes[i]);
      continue;
    }
    fputc('[', out);
    for (int64_t c = 0; c < rows->width; c++) {
      if (c) fputs(", ", out);
      write_number(out, rows->values[i * rows->width + c], rows->digits, 1);
    }
    fputc(']', out);
  }
  fputc(']', out);
  if (rows->labels) {
    fputs(", \"labels\": [", out);
    for (int64_t i = 0; i < rows->count; i++) fprintf(out, "%s%lld", i ? ", " : "", (long long)rows->labels[i]);
    fputc(']', out);
  }
  fputs("}\n", out);
}
