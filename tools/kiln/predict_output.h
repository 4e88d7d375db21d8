/* kiln predict's machine-readable output (--output, --format): the model's
 * logits, probabilities or classes as CSV or JSON, so that a script reads
 * them without parsing the human table. */
#ifndef KILN_TOOLS_PREDICT_OUTPUT_H
#define KILN_TOOLS_PREDICT_OUTPUT_H

#include <stdint.h>
#include <stdio.h>

#include <kiln/kiln.h>

typedef enum predict_format { PREDICT_TABLE, PREDICT_CSV, PREDICT_JSON } predict_format;

/* "logits", "probabilities", "classes" -> the kind; "table", "csv", "json"
 * -> the format. Return 0 for an unknown name. */
int predict_kind_from_name(const char *name, kiln_predict_kind *out);
int predict_format_from_name(const char *name, predict_format *out);

/* What kiln_model_predict gave for count rows, as host values, for a model
 * of width outputs (classes): classes holds count class indices
 * (KILN_PREDICT_CLASSES), else values holds count x width numbers. digits: the significant digits that give each
 * value back exactly (9 for f32 models, 17 for f64). labels (may be NULL)
 * are the true classes. */
typedef struct predict_rows {
  kiln_predict_kind kind;
  int64_t count, width;
  const double *values;
  const int64_t *classes;
  const int64_t *labels;
  int digits;
} predict_rows;

/* CSV: a header line ("index,class", "index,logit_0,...", then ",label"
 * when labels are known), then one line per row. */
void predict_write_csv(FILE *out, const predict_rows *rows);
/* JSON: {"output": KIND, "count": N, "width": W (the model's outputs),
 * "values": [...], "labels": [...]} with "values" a list of classes or of
 * rows of numbers (null for a value that is not finite) and "labels" only
 * when known. */
void predict_write_json(FILE *out, const predict_rows *rows);

#endif
