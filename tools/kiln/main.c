/* kiln: train and run MLPs from the command line. Dispatches to one
 * subcommand per file (devices.c, train.c, eval.c, predict.c; onnx.c has
 * export and import). */
#include <stdio.h>
#include <string.h>

#include <kiln/kiln.h>

#include "args.h"
#include "commands.h"
#include "spec_help.h"

typedef struct command {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *summary;
} command;

static const command commands[] = {
    {"devices", cmd_devices, "show whether CUDA is usable and every device kiln sees"},
    {"train", cmd_train, "train an MLP on an MNIST-layout dataset (Fashion-MNIST by default)"},
    {"eval", cmd_eval, "print a saved model's test loss and accuracy"},
    {"predict", cmd_predict, "print a saved model's predicted classes for test or IDX images"},
    {"export", cmd_export, "write a saved model as ONNX (for ONNX Runtime)"},
    {"import", cmd_import, "read an ONNX MLP (e.g. from torch.onnx.export) into a kiln model file"},
};
#define NUM_COMMANDS ((int)(sizeof commands / sizeof commands[0]))

static void print_usage(FILE *out) {
  fprintf(out, "usage: kiln COMMAND [options]\n\ncommands:\n");
  for (int i = 0; i < NUM_COMMANDS; i++) fprintf(out, "  %-9s %s\n", commands[i].name, commands[i].summary);
  fprintf(out,
          "\n'kiln COMMAND --help' describes a command's options.\n"
          "  --version  print kiln's version and exit\n"
          "  --help     show this help and exit\n"
          "\nexit codes: 0 success, 1 runtime error, 2 usage error\n");
  fprintf(out, "\n%s\n", KILN_SPEC_GRAMMAR_HELP);
}

static const command *find_command(const char *name) {
  for (int i = 0; i < NUM_COMMANDS; i++)
    if (strcmp(commands[i].name, name) == 0) return &commands[i];
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    print_usage(stderr);
    return EXIT_USAGE_ERROR;
  }
  const char *first = argv[1];
  if (strcmp(first, "--help") == 0 || strcmp(first, "-h") == 0) {
    print_usage(stdout);
    return 0;
  }
  if (strcmp(first, "--version") == 0) {
    /* The program's headers and the loaded library may differ in a
     * deployment; show both. */
    printf("kiln %d.%d.%d (library %s, ABI %d)\n", KILN_VERSION_MAJOR, KILN_VERSION_MINOR, KILN_VERSION_PATCH,
           kiln_version_string(), kiln_abi_version());
    return 0;
  }
  /* "kiln help train" is "kiln train --help". */
  int help = strcmp(first, "help") == 0;
  if (help && argc < 3) {
    print_usage(stdout);
    return 0;
  }
  const char *name = help ? argv[2] : first;
  const command *cmd = find_command(name);
  if (cmd && help) {
    char help_flag[] = "--help";
    char *help_argv[] = {argv[2], help_flag, NULL};
    return cmd->run(2, help_argv);
  }
  if (!cmd) {
    fprintf(stderr, "kiln: unknown command '%s' (see 'kiln --help')\n", name);
    return EXIT_USAGE_ERROR;
  }
  return cmd->run(argc - 1, argv + 1);
}
