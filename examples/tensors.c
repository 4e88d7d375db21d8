/* The tutorials' tensor moves, with kiln:
 *
 *   device = get_default_device()       -> kiln_default_device
 *   x = torch.tensor(data)              -> kiln_tensor_from_host (on the CPU)
 *   x = x.to(device)                    -> kiln_tensor_to
 *   y = torch.relu(x @ w).sum(dim=1)    -> kiln_tensor_matmul, _unary, _reduce
 *   y.cpu().numpy(), y.get_device()     -> kiln_tensor_copy_to_host, _get_device
 */
#include <stdio.h>
#include <stdlib.h>

#include <kiln/kiln.h>

#define CHECK(call)                                                                   \
  do {                                                                                \
    if ((call) != KILN_OK) {                                                          \
      fprintf(stderr, "%s failed: %s\n", #call, kiln_last_error());                   \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

int main(void) {
  kiln_context *ctx = NULL;
  CHECK(kiln_context_create(NULL, &ctx));
  kiln_device device;
  CHECK(kiln_default_device(ctx, &device));

  /* A 2x3 matrix and a 3x2 matrix, made on the CPU. */
  const float x_data[] = {1, -2, 3, -4, 5, -6};
  const float w_data[] = {1, 0, 0, 1, 1, 1};
  const int64_t x_shape[] = {2, 3}, w_shape[] = {3, 2};
  const kiln_device cpu = {KILN_DEVICE_CPU, -1};
  kiln_tensor *x_cpu = NULL, *w_cpu = NULL;
  CHECK(kiln_tensor_from_host(ctx, x_data, sizeof x_data, x_shape, 2, KILN_F32, cpu, &x_cpu));
  CHECK(kiln_tensor_from_host(ctx, w_data, sizeof w_data, w_shape, 2, KILN_F32, cpu, &w_cpu));

  int64_t where = 0;
  CHECK(kiln_tensor_get_device(x_cpu, &where));
  printf("x starts on device %lld (-1 is the CPU)\n", (long long)where);

  /* .to(device): a copy on the GPU, or the same tensor when device is the CPU. */
  kiln_tensor *x = NULL, *w = NULL;
  CHECK(kiln_tensor_to(x_cpu, device, &x));
  CHECK(kiln_tensor_to(w_cpu, device, &w));
  CHECK(kiln_tensor_get_device(x, &where));
  printf("x moved to device %lld\n", (long long)where);

  /* relu(x @ w).sum(dim=1), computed where x and w are. */
  kiln_tensor *xw = NULL, *act = NULL, *y = NULL;
  CHECK(kiln_tensor_matmul(x, w, &xw));
  CHECK(kiln_tensor_unary(KILN_RELU, xw, 0.0, &act));
  CHECK(kiln_tensor_reduce(KILN_SUM, act, 1, 0, &y));

  /* Reading back waits for the device, as .cpu() does. */
  float result[2];
  CHECK(kiln_tensor_copy_to_host(y, result, sizeof result));
  printf("relu(x @ w).sum(1) = [%g, %g]\n", result[0], result[1]); /* [5, 0] */

  kiln_tensor_release(y);
  kiln_tensor_release(act);
  kiln_tensor_release(xw);
  kiln_tensor_release(w);
  kiln_tensor_release(x);
  kiln_tensor_release(w_cpu);
  kiln_tensor_release(x_cpu);
  kiln_context_release(ctx);
  return 0;
}
