/* Reads an unlabelled IDX image file (raw or gzip) for `kiln predict
 * --input`: kiln's dataset loader wants a label file too, which a file of
 * images to classify does not have. */
#ifndef KILN_TOOLS_IDX_H
#define KILN_TOOLS_IDX_H

#include <stdint.h>

#include <kiln/kiln.h>

/* Reads a u8 IDX file of N samples (N x dims...) into a CPU f32 tensor
 * [N, features], scaled to [0, 1] exactly as kiln's datasets batch u8 images
 * by default. On failure writes a one-line reason into err and returns
 * non-zero. */
int idx_read_images(kiln_context *ctx, const char *path, kiln_tensor **out, char *err, size_t err_size);

#endif
