/* End to end on Fashion-MNIST (skipped when the data set is not installed):
 * the tutorial's 784-32-10 ReLU MLP with SGD (lr 0.1, batch 128, 5 epochs)
 * and 784-256-10 with Adam (lr 1e-3, 10 epochs), from fixed seeds, must end
 * at the test loss and accuracy those seeds give: on the CPU in
 * test_fashion_mnist, on cuda:0 alone in test_fashion_mnist_cuda
 * (KILN_TEST_DEVICE=cuda; skipped without a device). Prints accuracy and
 * throughput.
 *
 * The expected values are this test's own output on the CPU (2-core x86-64,
 * Debian 12, kiln at the commit that wrote them; `ctest -R
 * test_fashion_mnist -V` prints them), one pair per set of kernels the CPU
 * runs, since a CPU run is deterministic for a given kernel set but each set
 * rounds its products otherwise from the first step: kiln's AVX-512 kernels
 * (a Zen 5 EPYC), or on a CPU with AVX2 and FMA only kiln's AVX2 kernel
 * for the products of 64 rows or more and OpenBLAS for the rest (a Zen 3
 * EPYC), where the Adam case ends 1.2% from the AVX-512 loss. The tolerances then cover the same kernels built otherwise
 * and the rest of the trajectory's rounding. The test loss is the tight
 * check, 1%, far below what a wrong formula, a lost batch or a repeated
 * order costs (the same order every epoch: 3.1% on the SGD case, 6.7% on
 * Adam, on the Zen 3); the accuracy, a count of argmaxes that a rounding
 * flips near the decision boundaries, moves more than the loss and is held
 * to 1 point, the spread of other seeds: the same sources built for the
 * ASan lane (-O1, other rounding in kiln's own loops) end the Adam case at
 * 0.8861 accuracy and 0.3216 loss, 0.28 point and 0.06% from the Release
 * build. CUDA's products, and those of a CPU with neither kernel set, round
 * otherwise too and have no values of their own here: they are held to the
 * AVX-512 values within 1 point and 3% (CUDA not measured on a GPU when
 * written). A change that alters the trajectory on purpose (another
 * shuffle, another initialisation) updates the values, saying so in its
 * commit. */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

/* The test loss and accuracy a case ends at, per kernel set. */
typedef struct {
  double avx512_loss, avx512_accuracy;
  double avx2_loss, avx2_accuracy;
} expected;

typedef enum { KERNELS_AVX512, KERNELS_AVX2, KERNELS_OTHER } kernel_set;

/* The kernel set kiln's CPU backend runs here, decided as it decides
 * (avx512_available and avx2_fma_available, src/backend/cpu). */
static kernel_set cpu_kernel_set(void) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq"))
    return KERNELS_AVX512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return KERNELS_AVX2;
#endif
  return KERNELS_OTHER;
}

static const char *data_dir(void) {
  const char *env = getenv("KILN_FASHION_MNIST");
  return env ? env : "/usr/share/datasets/fashion-mnist";
}

typedef struct {
  kiln_context *ctx;
  kiln_dataset *train, *test;
} fixture;

static int setup(void **state) {
  fixture *f = calloc(1, sizeof *f);
  f->ctx = kiln_test_context_create(0);
  assert_kiln_ok(kiln_dataset_load_mnist(f->ctx, data_dir(), "train", &f->train));
  assert_kiln_ok(kiln_dataset_load_mnist(f->ctx, data_dir(), "test", &f->test));
  *state = f;
  return 0;
}

static int teardown(void **state) {
  fixture *f = *state;
  kiln_dataset_release(f->train);
  kiln_dataset_release(f->test);
  kiln_context_release(f->ctx);
  free(f);
  return 0;
}

static void train_and_check(fixture *f, kiln_device device, const char *spec_text, kiln_optimizer_kind optimizer,
                            double lr, int64_t epochs, expected want) {
  /* One fixed seed for the weights and the shuffle. Over seeds 1..6 the SGD
   * case lands at 84.1-85.2% (it is a 5-epoch run: seeds move it by ~1%). */
  assert_kiln_ok(kiln_context_set_seed(f->ctx, 1));
  kiln_model *model = kiln_test_model_on(f->ctx, spec_text, device, KILN_F32);
  kiln_trainer_options *opts = NULL;
  kiln_trainer *trainer = NULL;
  assert_kiln_ok(kiln_trainer_options_create(&opts));
  assert_kiln_ok(kiln_trainer_options_set_optimizer(opts, optimizer));
  assert_kiln_ok(kiln_trainer_options_set_lr(opts, lr));
  assert_kiln_ok(kiln_trainer_options_set_batch_size(opts, 128));
  assert_kiln_ok(kiln_trainer_options_set_shuffle_seed(opts, 1));
  assert_kiln_ok(kiln_trainer_create(model, opts, &trainer));
  kiln_history *history = NULL;
  assert_kiln_ok(kiln_trainer_fit(trainer, f->train, NULL, epochs, NULL, NULL, &history));
  double seconds = 0, samples = 0;
  for (int64_t e = 0; e < epochs; ++e) {
    kiln_epoch_stats s = {sizeof s};
    assert_kiln_ok(kiln_history_get(history, e, &s));
    seconds += s.seconds;
    samples += s.samples_per_second * s.seconds;
  }
  kiln_epoch_stats last = {sizeof last};
  assert_kiln_ok(kiln_history_get(history, epochs - 1, &last));
  double loss = 0, accuracy = 0;
  assert_kiln_ok(kiln_trainer_evaluate(trainer, f->test, &loss, &accuracy));
  char dev[16];
  assert_kiln_ok(kiln_device_format(device, dev, sizeof dev));
  print_message("%-5s %-12s %-5s %2lld epochs: train loss %.4f acc %.4f | test loss %.4f acc %.4f | %.0f samples/s "
                "(%.1f s)\n",
                dev, spec_text, optimizer == KILN_OPTIM_SGD ? "sgd" : "adam", (long long)epochs, last.train_loss,
                last.train_accuracy, loss, accuracy, samples / seconds, seconds);
  const kernel_set set = device.kind == KILN_DEVICE_CUDA ? KERNELS_OTHER : cpu_kernel_set();
  const double want_loss = set == KERNELS_AVX2 ? want.avx2_loss : want.avx512_loss;
  const double want_accuracy = set == KERNELS_AVX2 ? want.avx2_accuracy : want.avx512_accuracy;
  assert_allclose(&accuracy, &want_accuracy, 1, 0, 0.01);
  assert_allclose(&loss, &want_loss, 1, set == KERNELS_OTHER ? 0.03 : 0.01, 0);
  kiln_history_release(history);
  kiln_trainer_release(trainer);
  kiln_trainer_options_release(opts);
  kiln_model_release(model);
}

static void test_tutorial_sgd(void **state) {
  fixture *f = *state;
  const expected want = {0.4289, 0.8471, 0.4289, 0.8471};
  train_and_check(f, kiln_test_device(f->ctx), "784-32-10", KILN_OPTIM_SGD, 0.1, 5, want);
}

static void test_wide_adam(void **state) {
  fixture *f = *state;
  const expected want = {0.3214, 0.8833, 0.3248, 0.8826};
  train_and_check(f, kiln_test_device(f->ctx), "784-256-10", KILN_OPTIM_ADAM, 1e-3, 10, want);
}

int main(void) {
  struct stat st;
  if (stat(data_dir(), &st) != 0) {
    fprintf(stderr, "%s not found: skipping\n", data_dir());
    return KILN_TEST_SKIPPED;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tutorial_sgd),
      cmocka_unit_test(test_wide_adam),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
