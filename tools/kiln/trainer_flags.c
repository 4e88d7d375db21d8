#include "trainer_flags.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef enum row_kind { ROW_DOUBLE, ROW_INT, ROW_UINT, ROW_BOOL, ROW_ENUM, ROW_BITS, ROW_DEVICES } row_kind;

/* What this file needs of a row of the table. */
typedef struct row {
  const char *id, *flag, *meta, *help, *names;
  row_kind kind;
  double dflt, unit;
  int flags;
} row;

static const row kRows[TRAINER_OPTION_COUNT] = {
#define KILN_OPTION(id, setter, kind, ctype, dflt, lo, hi, flags, names, flag, meta, unit, help) \
  {#id, flag, meta, help, names, ROW_##kind, (double)(dflt), (double)(unit), flags},
#include "train/options_table.h"
};

static int find_row(const char *flag) {
  for (int i = 0; i < TRAINER_OPTION_COUNT; i++)
    if (kRows[i].flag[0] && strcmp(kRows[i].flag, flag) == 0) return i;
  return -1;
}

/* The index of name among the row's '|'-separated names, or -1. */
static int enum_index(const row *r, const char *name) {
  const char *p = r->names;
  size_t len = strlen(name);
  for (int i = 0; *p; i++) {
    const char *end = strchr(p, '|');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n == len && strncmp(p, name, n) == 0) return i;
    if (!end) break;
    p = end + 1;
  }
  return -1;
}

/* The i-th name of the row, copied into buf. */
static const char *enum_name(const row *r, int index, char *buf, size_t size) {
  const char *p = r->names;
  for (int i = 0; i < index && p; i++) {
    p = strchr(p, '|');
    if (p) p++;
  }
  if (!p) return "?";
  const char *end = strchr(p, '|');
  size_t n = end ? (size_t)(end - p) : strlen(p);
  if (n >= size) n = size - 1;
  memcpy(buf, p, n);
  buf[n] = '\0';
  return buf;
}

static int is_numeric(row_kind k) { return k == ROW_DOUBLE || k == ROW_INT || k == ROW_UINT || k == ROW_BITS; }

void trainer_flags_init(trainer_flags *f) {
  for (int i = 0; i < TRAINER_OPTION_COUNT; i++) {
    f->number[i] = NAN;
    f->name[i] = NULL;
    f->help[i][0] = '\0';
  }
}

void trainer_flags_preset(trainer_flags *f, const char *flag, double value) {
  int i = find_row(flag);
  if (i >= 0) f->number[i] = value;
}

void trainer_flags_add_options(trainer_flags *f, cli_option *options, int *count, int capacity) {
  for (int i = 0; i < TRAINER_OPTION_COUNT && *count < capacity; i++) {
    const row *r = &kRows[i];
    if (!r->flag[0]) continue;
    char dflt[64] = "";
    if (r->kind == ROW_ENUM) {
      char name[32];
      snprintf(dflt, sizeof dflt, " (default %s)", enum_name(r, (int)r->dflt, name, sizeof name));
    } else if (is_numeric(r->kind) && !(r->flags & KILN_OPTION_DEFAULT_VARIES)) {
      snprintf(dflt, sizeof dflt, " (default %g)", isnan(f->number[i]) ? r->dflt / r->unit : f->number[i]);
    }
    snprintf(f->help[i], sizeof f->help[i], "%s%s", r->help, dflt);
    cli_option *o = &options[(*count)++];
    o->name = r->flag;
    o->kind = r->kind == ROW_ENUM ? CLI_STRING : CLI_DOUBLE;
    o->value = r->kind == ROW_ENUM ? (void *)&f->name[i] : (void *)&f->number[i];
    o->metavar = r->meta;
    o->help = f->help[i];
  }
}

/* The value of numeric row i in the option's own units. A whole-number
 * option given in its own units must be given a whole number; given in
 * larger ones (MiB of bytes), the fraction of a unit is dropped. Returns 0
 * after saying why on stderr when the value does not fit. */
static int option_units(const cli_command *cmd, const trainer_flags *f, int i, double *out) {
  const row *r = &kRows[i];
  double v = f->number[i] * r->unit;
  if (r->kind != ROW_DOUBLE) {
    if (r->unit == 1 && v != floor(v)) {
      cli_usage_error(cmd, "--%s needs a whole number, got %g", r->flag, f->number[i]);
      return 0;
    }
    if (fabs(v) >= 9.2e18) {
      cli_usage_error(cmd, "--%s %g is too large", r->flag, f->number[i]);
      return 0;
    }
    v = trunc(v);
  }
  *out = v;
  return 1;
}

int trainer_flags_options(const cli_command *cmd, const trainer_flags *f, kiln_trainer_options **out) {
  /* Names and whole numbers first, so that a bad flag is a usage error
   * naming the flag before any setter runs. */
  double value[TRAINER_OPTION_COUNT];
  for (int i = 0; i < TRAINER_OPTION_COUNT; i++) {
    const row *r = &kRows[i];
    value[i] = NAN;
    if (r->kind == ROW_ENUM && f->name[i]) {
      int index = enum_index(r, f->name[i]);
      if (index < 0) {
        char names[128];
        snprintf(names, sizeof names, "%s", r->names);
        for (char *bar = strchr(names, '|'); bar; bar = strchr(bar, '|')) *bar = '/';
        return cli_usage_error(cmd, "unknown --%s '%s' (%s)", r->flag, f->name[i], names);
      }
      value[i] = index;
    } else if (is_numeric(r->kind) && !isnan(f->number[i]) && !option_units(cmd, f, i, &value[i])) {
      return EXIT_USAGE_ERROR;
    }
  }
  kiln_trainer_options *o = NULL;
  if (kiln_trainer_options_create(&o) != KILN_OK) {
    fprintf(stderr, "kiln %s: cannot create trainer options: %s\n", cmd->name, kiln_last_error());
    return EXIT_RUNTIME_ERROR;
  }
  kiln_status st = KILN_OK;
  int failed = -1, i = 0;
  /* One setter call per row that is given a value; the custom rows (several
   * values per setter) have no flag. */
#define KILN_OPTION(id, setter, kind, ctype, ...)                     \
  if (st == KILN_OK && !isnan(value[i])) {                            \
    st = kiln_trainer_options_set_##id(o, (ctype)value[i]);           \
    if (st != KILN_OK) failed = i;                                    \
  }                                                                   \
  i++;
#define KILN_OPTION_CUSTOM(...) i++;
#include "train/options_table.h"
  if (st != KILN_OK) {
    kiln_trainer_options_release(o);
    return cli_usage_error(cmd, "--%s: %s", kRows[failed].flag, kiln_last_error());
  }
  *out = o;
  return CLI_CONTINUE;
}

int trainer_flag_given(const trainer_flags *f, const char *flag) {
  int i = find_row(flag);
  return i >= 0 && (kRows[i].kind == ROW_ENUM ? f->name[i] != NULL : !isnan(f->number[i]));
}

double trainer_flag_number(const trainer_flags *f, const char *flag) {
  int i = find_row(flag);
  if (i < 0) return NAN;
  return isnan(f->number[i]) ? kRows[i].dflt / kRows[i].unit : f->number[i];
}

const char *trainer_flag_name(const trainer_flags *f, const char *flag) {
  /* A buffer per row: one printf may show several flags' defaults. */
  static char names[TRAINER_OPTION_COUNT][32];
  int i = find_row(flag);
  if (i < 0) return "?";
  return f->name[i] ? f->name[i] : enum_name(&kRows[i], (int)kRows[i].dflt, names[i], sizeof names[i]);
}
