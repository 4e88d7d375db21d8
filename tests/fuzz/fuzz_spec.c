/*
 * Fuzzes the compact spec parser, kiln_model_spec_parse. The input is split
 * at its first NUL byte: the first part is parsed into a new spec, and the
 * second (when there is one) appended to it, which reaches the check that
 * the appended first size equals the last Linear's out_features. A spec may
 * only be refused with INVALID_ARGUMENT or SHAPE_MISMATCH, and a refusal
 * must come with a bounded message (a spec of a megabyte is not quoted
 * whole). Specs that parse are built into a model when they are small, and
 * the model's description must parse back into a model of the same size.
 */
#include "fuzz_support.h" /* first: it defines _GNU_SOURCE */

#include <string.h>

/* Models of up to this many parameters are created (cheap); larger specs are
 * only parsed, so that "4096-4096-4096" does not cost a second per input. */
#define MAX_CREATED_PARAMETERS 4096

static const kiln_status allowed[] = {KILN_ERROR_INVALID_ARGUMENT, KILN_ERROR_SHAPE_MISMATCH};

static kiln_status parse(kiln_model_spec *spec, const char *text) {
  kiln_status status = kiln_model_spec_parse(spec, text);
  kiln_fuzz_expect("kiln_model_spec_parse", status, allowed, 2); /* bounds the message too */
  return status;
}

/* Creates a model of spec; its description must parse back into a model
 * of as many parameters. */
static void create_and_round_trip(kiln_model_spec *spec) {
  kiln_model *model = NULL;
  static const kiln_status create_allowed[] = {KILN_ERROR_INVALID_ARGUMENT, KILN_ERROR_OUT_OF_MEMORY};
  const kiln_device cpu = {KILN_DEVICE_CPU, -1};
  kiln_status status = kiln_model_create(kiln_fuzz_context(), spec, cpu, &model);
  kiln_fuzz_expect("kiln_model_create", status, create_allowed, 2);
  if (status != KILN_OK) return;
  int64_t parameters = 0, again = -1;
  const char *description = NULL;
  if (kiln_model_num_parameters(model, &parameters) != KILN_OK || kiln_model_describe(model, &description) != KILN_OK)
    kiln_fuzz_die(kiln_last_error());
  kiln_model_spec *copy = NULL;
  kiln_model *model2 = NULL;
  if (kiln_model_spec_create(&copy) != KILN_OK || kiln_model_spec_parse(copy, description) != KILN_OK ||
      kiln_model_create(kiln_fuzz_context(), copy, cpu, &model2) != KILN_OK ||
      kiln_model_num_parameters(model2, &again) != KILN_OK)
    kiln_fuzz_die("a model's description does not parse back into a model");
  if (again != parameters) kiln_fuzz_die("a model's description parses into a model of another size");
  kiln_model_release(model2);
  kiln_model_spec_release(copy);
  kiln_model_release(model);
}

/* The parameter count a parsed spec implies, read from the digits of its
 * text, saturating at MAX_CREATED_PARAMETERS + 1: only an estimate to decide
 * whether to build the model. */
static int64_t estimated_parameters(const char *text) {
  int64_t total = 0, previous = -1, current = -1;
  for (const char *p = text;; ++p) {
    if (*p >= '0' && *p <= '9') {
      current = (current < 0 ? 0 : current) * 10 + (*p - '0');
      if (current > MAX_CREATED_PARAMETERS) return MAX_CREATED_PARAMETERS + 1;
      continue;
    }
    if (current >= 0) {
      if (previous >= 0) total += previous * current + current;
      if (total > MAX_CREATED_PARAMETERS) return total;
      previous = current;
      current = -1;
    }
    if (*p == ':' || *p == '\0') break; /* options follow; their numbers are not sizes */
  }
  return total;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *text = malloc(size + 2); /* two NULs: the second part is "" when there is no NUL */
  if (!text) kiln_fuzz_die("out of memory");
  memcpy(text, data, size);
  text[size] = text[size + 1] = '\0';
  const char *second = text + strlen(text) + 1;
  const int has_second = (size_t)(second - text) <= size;

  kiln_model_spec *spec = NULL;
  if (kiln_model_spec_create(&spec) != KILN_OK) kiln_fuzz_die(kiln_last_error());
  if (parse(spec, text) == KILN_OK && (!has_second || parse(spec, second) == KILN_OK) &&
      estimated_parameters(text) + (has_second ? estimated_parameters(second) : 0) <= MAX_CREATED_PARAMETERS)
    create_and_round_trip(spec);
  kiln_model_spec_release(spec);
  free(text);
  return 0;
}
