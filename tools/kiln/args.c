#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int cli_usage_error(const cli_command *cmd, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "kiln %s: ", cmd->name);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, " (see 'kiln %s --help')\n", cmd->name);
  return EXIT_USAGE_ERROR;
}

void cli_print_help(const cli_command *cmd, FILE *out) {
  fprintf(out, "usage: kiln %s [options]%s%s\n\n%s\n\noptions:\n", cmd->name, cmd->synopsis[0] ? " " : "",
          cmd->synopsis, cmd->summary);
  for (int i = 0; i < cmd->num_options; i++) {
    const cli_option *o = &cmd->options[i];
    char left[64];
    snprintf(left, sizeof left, "--%s%s%s", o->name, o->metavar ? " " : "", o->metavar ? o->metavar : "");
    fprintf(out, "  %-24s %s\n", left, o->help);
  }
  fprintf(out, "  %-24s %s\n", "--help", "show this help and exit");
}

static const cli_option *find_option(const cli_command *cmd, const char *name, size_t len) {
  for (int i = 0; i < cmd->num_options; i++) {
    const char *n = cmd->options[i].name;
    if (strlen(n) == len && strncmp(n, name, len) == 0) return &cmd->options[i];
  }
  return NULL;
}

/* Stores text into the option's value; returns CLI_CONTINUE or the exit code. */
static int store(const cli_command *cmd, const cli_option *o, const char *text) {
  char *end = NULL;
  errno = 0;
  switch (o->kind) {
    case CLI_INT: {
      long long v = strtoll(text, &end, 10);
      if (end == text || *end != '\0' || errno == ERANGE)
        return cli_usage_error(cmd, "--%s needs a whole number, got '%s'", o->name, text);
      *(int64_t *)o->value = (int64_t)v;
      break;
    }
    case CLI_DOUBLE: {
      double v = strtod(text, &end);
      if (end == text || *end != '\0' || errno == ERANGE || !isfinite(v))
        return cli_usage_error(cmd, "--%s needs a number, got '%s'", o->name, text);
      *(double *)o->value = v;
      break;
    }
    case CLI_STRING:
      if (text[0] == '\0') return cli_usage_error(cmd, "--%s needs a non-empty value", o->name);
      *(const char **)o->value = text;
      break;
    case CLI_FLAG:
      return cli_usage_error(cmd, "--%s takes no value", o->name);
  }
  return CLI_CONTINUE;
}

int cli_parse(cli_command *cmd, int argc, char **argv) {
  int options_done = 0;
  cmd->num_positionals = 0;
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (options_done || arg[0] != '-' || arg[1] == '\0') {
      if (cmd->num_positionals >= cmd->max_positionals)
        return cli_usage_error(cmd, "unexpected argument '%s'", arg);
      cmd->positionals[cmd->num_positionals++] = arg;
      continue;
    }
    if (strcmp(arg, "--") == 0) {
      options_done = 1;
      continue;
    }
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      cli_print_help(cmd, stdout);
      return 0;
    }
    if (arg[1] != '-') return cli_usage_error(cmd, "unknown option '%s'", arg);
    const char *name = arg + 2;
    const char *eq = strchr(name, '=');
    const cli_option *o = find_option(cmd, name, eq ? (size_t)(eq - name) : strlen(name));
    if (!o) return cli_usage_error(cmd, "unknown option '%s'", arg);
    if (o->kind == CLI_FLAG) {
      if (eq) return cli_usage_error(cmd, "--%s takes no value", o->name);
      *(int *)o->value = 1;
      continue;
    }
    const char *text = eq ? eq + 1 : NULL;
    if (!text) {
      /* "--save --epochs 3" forgot the file name: do not save to "--epochs". */
      if (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0)
        return cli_usage_error(cmd, "--%s needs a value (%s)", o->name, o->metavar);
      text = argv[++i];
    }
    int rc = store(cmd, o, text);
    if (rc != CLI_CONTINUE) return rc;
  }
  if (cmd->num_positionals < cmd->min_positionals)
    return cli_usage_error(cmd, "missing argument %s", cmd->synopsis);
  return CLI_CONTINUE;
}
