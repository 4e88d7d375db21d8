/* kiln export / kiln import: models to and from ONNX. */
#include <stdio.h>

#include "commands.h"
#include "common.h"

int cmd_export(int argc, char **argv) {
  const char *onnx = NULL, *spec = NULL;
  int external = 0;
  const cli_option options[] = {
      {"onnx", CLI_STRING, &onnx, "OUT", "write the model as an ONNX file OUT (required)"},
      {"spec", CLI_STRING, &spec, "SPEC", "read MODEL as this MLP's PyTorch state_dict (e.g. 784-32-10)"},
      {"external-data", CLI_FLAG, &external, NULL,
       "write the weights to OUT.data beside OUT (ONNX external data; automatic when OUT would pass 1 GiB)"},
  };
  cli_command cmd = {
      .name = "export",
      .synopsis = "MODEL --onnx OUT.onnx",
      .summary = "Writes MODEL (a file written by 'kiln train --save', or with --spec a safetensors\n"
                 "state_dict saved from PyTorch) as ONNX, for ONNX Runtime and other ONNX tools. A model\n"
                 "too large for one ONNX file (over 1 GiB) keeps its weights in OUT.data beside it.",
      .options = options,
      .num_options = (int)(sizeof options / sizeof options[0]),
      .min_positionals = 1,
      .max_positionals = 1,
  };
  int rc = cli_parse(&cmd, argc, argv);
  if (rc != CLI_CONTINUE) return rc;
  if (!onnx) return cli_usage_error(&cmd, "--onnx OUT is required");
  const char *path = cmd.positionals[0];

  kiln_context *ctx = NULL;
  kiln_device cpu;
  kiln_model *model = NULL;
  rc = open_context(&cmd, "cpu", 0, 1, &ctx, &cpu);
  if (rc == CLI_CONTINUE) rc = load_model_file(&cmd, ctx, path, spec, cpu, &model);
  if (rc == CLI_CONTINUE)
    rc = kiln_model_export_onnx_v2(model, onnx, external ? KILN_ONNX_EXPORT_EXTERNAL_DATA : KILN_ONNX_EXPORT_DEFAULT) ==
                 KILN_OK
             ? 0
             : report_error(&cmd, NULL); /* the message says "cannot export 'OUT' as ONNX" */
  if (rc == 0) printf("wrote %s\n", onnx);
  kiln_model_release(model);
  kiln_context_release(ctx);
  return rc;
}

int cmd_import(int argc, char **argv) {
  const char *save = NULL;
  const cli_option options[] = {
      {"save", CLI_STRING, &save, "MODEL", "write the imported model as a kiln model file MODEL (required)"},
  };
  cli_command cmd = {
      .name = "import",
      .synopsis = "IN.onnx --save MODEL",
      .summary = "Reads an ONNX MLP (Gemm or MatMul+Add layers and their activations, e.g. from\n"
                 "torch.onnx.export, opsets 7 to 28, weights inline or in files beside it) and saves it\n"
                 "as a kiln model file for eval, predict or training.",
      .options = options,
      .num_options = (int)(sizeof options / sizeof options[0]),
      .min_positionals = 1,
      .max_positionals = 1,
  };
  int rc = cli_parse(&cmd, argc, argv);
  if (rc != CLI_CONTINUE) return rc;
  if (!save) return cli_usage_error(&cmd, "--save MODEL is required");
  const char *path = cmd.positionals[0];

  kiln_context *ctx = NULL;
  kiln_device cpu;
  kiln_model *model = NULL;
  char what[512];
  rc = open_context(&cmd, "cpu", 0, 1, &ctx, &cpu);
  /* The message says "cannot import 'IN.onnx'". */
  if (rc == CLI_CONTINUE && kiln_model_import_onnx(ctx, path, &model) != KILN_OK) rc = report_error(&cmd, NULL);
  if (rc == CLI_CONTINUE) {
    snprintf(what, sizeof what, "cannot save '%s'", save);
    if (kiln_model_save(model, save) != KILN_OK) rc = report_error(&cmd, what);
  }
  if (rc == CLI_CONTINUE) {
    const char *description = NULL;
    if (kiln_model_describe(model, &description) == KILN_OK) printf("imported %s: %s\n", path, description);
    printf("wrote %s\n", save);
    rc = 0;
  }
  kiln_model_release(model);
  kiln_context_release(ctx);
  return rc;
}
