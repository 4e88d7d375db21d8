/* kiln eval: a saved model's loss and accuracy on a dataset's test split. */
#include <stdio.h>

#include "commands.h"
#include "common.h"
#include "spec_help.h"

int cmd_eval(int argc, char **argv) {
  const char *data = DEFAULT_DATA_DIR, *device = "auto", *spec = NULL;
  const cli_option options[] = {
      {"data", CLI_STRING, &data, "DIR", "MNIST-layout dataset directory (default " DEFAULT_DATA_DIR ")"},
      {"device", CLI_STRING, &device, "DEV", "auto, cpu or cuda:N (default auto)"},
      {"spec", CLI_STRING, &spec, "SPEC",
       "read MODEL as a PyTorch state_dict of this MLP (e.g. 784-32-10; specs above)"},
  };
  cli_command cmd = {
      .name = "eval",
      .synopsis = "MODEL",
      .summary = "Prints the test loss and accuracy of MODEL (a file written by 'kiln train --save',\n"
                 "or with --spec a state_dict saved from PyTorch: safetensors.torch.save_file or\n"
                 "torch.save, told apart by their content).\n"
                 "\n" KILN_SPEC_GRAMMAR_HELP,
      .options = options,
      .num_options = (int)(sizeof options / sizeof options[0]),
      .min_positionals = 1,
      .max_positionals = 1,
  };
  int rc = cli_parse(&cmd, argc, argv);
  if (rc != CLI_CONTINUE) return rc;
  const char *path = cmd.positionals[0];

  kiln_context *ctx = NULL;
  kiln_device dev;
  kiln_model *model = NULL;
  kiln_dataset *test = NULL;
  kiln_trainer *trainer = NULL;
  rc = open_context(&cmd, device, 0, 0, &ctx, &dev);
  if (rc == CLI_CONTINUE) rc = load_model_file(&cmd, ctx, path, spec, dev, &model);
  if (rc == CLI_CONTINUE) rc = load_split(&cmd, ctx, data, "test", &test);
  /* The trainer is only the evaluator here: its options do not matter. */
  if (rc == CLI_CONTINUE && kiln_trainer_create(model, NULL, &trainer) != KILN_OK)
    rc = report_error(&cmd, "cannot create an evaluator");
  if (rc == CLI_CONTINUE) {
    double loss = 0, accuracy = 0;
    if (kiln_trainer_evaluate(trainer, test, &loss, &accuracy) != KILN_OK) {
      rc = report_error(&cmd, "evaluation failed");
    } else {
      printf("test loss: %.4f\n", loss);
      printf("test accuracy: %.2f%%\n", 100.0 * accuracy);
      rc = 0;
    }
  }
  kiln_trainer_release(trainer);
  kiln_dataset_release(test);
  kiln_model_release(model);
  kiln_context_release(ctx);
  return rc;
}
