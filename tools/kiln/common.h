/* What the kiln subcommands share: opening a context on the requested
 * device, loading dataset splits, reporting kiln's errors. */
#ifndef KILN_TOOLS_COMMON_H
#define KILN_TOOLS_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include <kiln/kiln.h>

#include "args.h"

#define DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"

/* Fashion-MNIST's class names, by label. */
extern const char *const fashion_mnist_classes[10];

/* Prints "kiln CMD: WHAT: <kiln's message>" on stderr, or "kiln CMD:
 * <kiln's message>" when what is NULL (a message that already says what
 * failed: "cannot import 'x.onnx': ..."); returns EXIT_RUNTIME_ERROR. */
int report_error(const cli_command *cmd, const char *what);

/* Creates a context (seed, threads: 0 = one per core) and resolves
 * device_text ("auto", "cpu", "cuda:N"). For "cpu" the CUDA plugin is not
 * loaded at all. Returns CLI_CONTINUE, EXIT_USAGE_ERROR for malformed device
 * text, or EXIT_RUNTIME_ERROR with kiln's reason (e.g. no such GPU). */
int open_context(const cli_command *cmd, const char *device_text, uint64_t seed, int64_t threads,
                 kiln_context **ctx, kiln_device *device);

/* Loads the "train" or "test" split of an MNIST-layout directory. When the
 * files are not there, says which ones were looked for and how to get them. */
int load_split(const cli_command *cmd, kiln_context *ctx, const char *dir, const char *split, kiln_dataset **out);

/* Loads the model file path onto device: a file kiln wrote (spec_text NULL),
 * or, given a spec such as "784-32-10", any safetensors file holding that
 * MLP's parameters under PyTorch's nn.Sequential state_dict names (e.g.
 * safetensors.torch.save_file(model.state_dict(), path)). Returns
 * CLI_CONTINUE, EXIT_USAGE_ERROR for a malformed spec, or EXIT_RUNTIME_ERROR
 * with kiln's reason (naming the tensor that does not fit). */
int load_model_file(const cli_command *cmd, kiln_context *ctx, const char *path, const char *spec_text,
                    kiln_device device, kiln_model **out);

/* "cuda:0 (NVIDIA H100 80GB HBM3)" or "cpu (AMD EPYC 7B13, 16 threads)". */
void describe_device(kiln_context *ctx, kiln_device device, char *buf, size_t size);

#endif
