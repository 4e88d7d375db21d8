/* kiln train's flags for trainer options (--lr, --batch, --optimizer, ...),
 * made from the library's option table (src/train/options_table.h): their
 * names, value kinds and help come from the rows that name a flag, and each
 * value is handed to the row's setter, so the library's range is the only
 * one and a new option with a flag needs no code here. */
#ifndef KILN_TOOLS_TRAINER_FLAGS_H
#define KILN_TOOLS_TRAINER_FLAGS_H

#include <math.h>

#include <kiln/kiln.h>

#include "args.h"

enum {
  TRAINER_OPTION_COUNT = 0
#define KILN_OPTION(...) +1
#include "train/options_table.h"
};

typedef struct trainer_flags {
  double number[TRAINER_OPTION_COUNT];    /* numeric rows: NAN until given */
  const char *name[TRAINER_OPTION_COUNT]; /* ENUM rows: NULL until given */
  char help[TRAINER_OPTION_COUNT][320];   /* each flag's help, with its default */
} trainer_flags;

/* Every flag not given. */
void trainer_flags_init(trainer_flags *f);
/* Gives the numeric `flag` (a row's flag) `value` unless the command line
 * gives another: kiln train's own defaults, where they differ from the
 * library's (the tutorial's lr 0.1, batch 128). */
void trainer_flags_preset(trainer_flags *f, const char *flag, double value);
/* Appends a cli_option for every row with a flag to options[*count ..
 * capacity), with help texts naming the defaults. */
void trainer_flags_add_options(trainer_flags *f, cli_option *options, int *count, int capacity);
/* After cli_parse: the trainer options of every given flag, each set
 * through its setter, into *out (the caller's). Returns CLI_CONTINUE, or
 * EXIT_USAGE_ERROR after saying which flag has which problem (an unknown
 * name, a fraction of a whole-number option, or the setter's message). */
int trainer_flags_options(const cli_command *cmd, const trainer_flags *f, kiln_trainer_options **out);

/* Whether flag was given (or preset), and its value in the flag's units:
 * the given number, else the library's default. */
int trainer_flag_given(const trainer_flags *f, const char *flag);
double trainer_flag_number(const trainer_flags *f, const char *flag);
/* An ENUM flag's name: the given one, else the default's. */
const char *trainer_flag_name(const trainer_flags *f, const char *flag);

#endif
