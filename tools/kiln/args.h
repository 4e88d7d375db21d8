/* Command line parsing for the kiln subcommands. Each command describes its
 * options in one table; parsing, validation of numbers and --help text all
 * come from that table, so they cannot drift apart. */
#ifndef KILN_TOOLS_ARGS_H
#define KILN_TOOLS_ARGS_H

#include <stdint.h>
#include <stdio.h>

typedef enum cli_kind {
  CLI_FLAG,   /* value: int*, set to 1 when present */
  CLI_INT,    /* value: int64_t* */
  CLI_DOUBLE, /* value: double* */
  CLI_STRING  /* value: const char** (points into argv) */
} cli_kind;

typedef struct cli_option {
  const char *name;    /* without the leading "--" */
  cli_kind kind;
  void *value;
  const char *metavar; /* "N", "FILE"; NULL for flags */
  const char *help;    /* one line, defaults included */
} cli_option;

#define CLI_MAX_POSITIONALS 4

typedef struct cli_command {
  const char *name;       /* "train" */
  const char *synopsis;   /* positional arguments, e.g. "MODEL", or "" */
  const char *summary;    /* one line on what the command does */
  const cli_option *options;
  int num_options;
  int min_positionals;
  int max_positionals;
  /* Filled by cli_parse. */
  const char *positionals[CLI_MAX_POSITIONALS];
  int num_positionals;
} cli_command;

/* Returned by cli_parse when the command should go on and run. */
#define CLI_CONTINUE (-1)
/* Exit codes of the program. */
#define EXIT_RUNTIME_ERROR 1
#define EXIT_USAGE_ERROR 2

/* Parses argv[1..argc) ("--name value", "--name=value", positionals; "--"
 * ends the options). Returns CLI_CONTINUE on success; otherwise what main
 * should return: 0 after printing --help, EXIT_USAGE_ERROR after printing
 * one line on stderr. */
int cli_parse(cli_command *cmd, int argc, char **argv);

/* Prints "kiln CMD: <message>" and a hint to --help on stderr; returns
 * EXIT_USAGE_ERROR. */
int cli_usage_error(const cli_command *cmd, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

void cli_print_help(const cli_command *cmd, FILE *out);

#endif
