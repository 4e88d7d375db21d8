/* The kiln subcommands. Each takes its own argv (argv[0] is the command's
 * name) and returns the process exit code: 0, EXIT_RUNTIME_ERROR or
 * EXIT_USAGE_ERROR. */
#ifndef KILN_TOOLS_COMMANDS_H
#define KILN_TOOLS_COMMANDS_H

int cmd_devices(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_predict(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_import(int argc, char **argv);

#endif
