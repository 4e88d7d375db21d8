/* One benchmark run of kiln, printed as one JSON object on stdout.
 *
 *   kiln_bench --workload A|B --epochs N [--device D] [--threads T] [--seed S] [--data DIR]
 *   kiln_bench --workload C --model A|B [--device D] [--threads T] [--data DIR]
 *   mpirun -np N kiln_bench --workload A|B --epochs N --distributed 1 [...]
 *       DDP over the MPI job: --batch-per-rank B (default the workload's
 *       batch) on every rank; rank 0 prints, samples/s count every rank's
 *
 * A: 784-32-10 ReLU, SGD lr 0.1, batch 128.  B: 784-1024-1024-10 ReLU, SGD
 * lr 0.1, batch 256.  C: inference samples/s of A's or B's model at batch 1,
 * 64 and 4096 over the test set. bench/run.py drives it next to PyTorch. */
#include <kiln/kiln.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define CHECK(call)                                                                          \
  do {                                                                                       \
    kiln_status s_ = (call);                                                                 \
    if (s_ != KILN_OK) {                                                                     \
      fprintf(stderr, "kiln_bench: %s failed: %s: %s\n", #call, kiln_status_name(s_),        \
              kiln_last_error());                                                            \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double peak_rss_mib(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0; /* Linux reports KiB */
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct workload {
  const char *spec;
  int64_t batch;
};

static struct workload workload_of(char name) {
  if (name == 'A') return (struct workload){"784-32-10", 128};
  if (name == 'B') return (struct workload){"784-1024-1024-10", 256};
  fprintf(stderr, "kiln_bench: unknown workload %c (A or B)\n", name);
  exit(2);
}

static kiln_model *make_model(kiln_context *ctx, const char *spec_text, kiln_device dev) {
  kiln_model_spec *spec;
  kiln_model *model;
  CHECK(kiln_model_spec_create(&spec));
  CHECK(kiln_model_spec_parse(spec, spec_text));
  CHECK(kiln_model_create(ctx, spec, dev, &model));
  kiln_model_spec_release(spec);
  return model;
}

static void train(kiln_context *ctx, kiln_device dev, char name, int epochs, const char *data,
                  kiln_communicator *comm, int64_t batch) {
  struct workload w = workload_of(name);
  if (batch > 0) w.batch = batch;
  int64_t rank = 0, ranks = 1;
  if (comm) {
    CHECK(kiln_communicator_rank(comm, &rank));
    CHECK(kiln_communicator_size(comm, &ranks));
  }
  kiln_dataset *train_set, *test_set;
  CHECK(kiln_dataset_load_mnist(ctx, data, "train", &train_set));
  CHECK(kiln_dataset_load_mnist(ctx, data, "test", &test_set));
  kiln_model *model = make_model(ctx, w.spec, dev);
  kiln_trainer_options *opts;
  kiln_trainer *trainer;
  CHECK(kiln_trainer_options_create(&opts));
  CHECK(kiln_trainer_options_set_lr(opts, 0.1));
  CHECK(kiln_trainer_options_set_batch_size(opts, w.batch));
  CHECK(kiln_trainer_create(model, opts, &trainer));
  if (comm) CHECK(kiln_trainer_attach_communicator(trainer, comm));

  double seconds[64];
  if (epochs > 64) epochs = 64;
  int64_t n;
  CHECK(kiln_dataset_size(train_set, &n));
  for (int e = 0; e < epochs; ++e) {
    kiln_epoch_stats stats = {.struct_size = sizeof stats};
    double t0 = now();
    CHECK(kiln_trainer_epoch(trainer, train_set, &stats));
    seconds[e] = now() - t0;
  }
  double loss, acc;
  CHECK(kiln_trainer_evaluate(trainer, test_set, &loss, &acc));
  double med = median(seconds, epochs);
  if (rank != 0) goto done;
  printf("{\"impl\": \"kiln\", \"workload\": \"%c\", \"ranks\": %lld, \"batch_per_rank\": %lld, \"epochs\": %d, "
         "\"epoch_seconds\": [",
         name, (long long)ranks, (long long)w.batch, epochs);
  for (int e = 0; e < epochs; ++e) printf("%s%.6f", e ? ", " : "", seconds[e]);
  printf("], \"median_epoch_seconds\": %.6f, \"samples_per_second\": %.1f, \"test_accuracy\": %.4f, "
         "\"peak_rss_mib\": %.1f}\n",
         med, (double)n / med, acc, peak_rss_mib());
done:
  kiln_trainer_release(trainer);
  kiln_trainer_options_release(opts);
  kiln_model_release(model);
  kiln_dataset_release(train_set);
  kiln_dataset_release(test_set);
}

static void infer(kiln_context *ctx, kiln_device dev, char name, const char *data) {
  struct workload w = workload_of(name);
  kiln_dataset *test_set;
  CHECK(kiln_dataset_load_mnist(ctx, data, "test", &test_set));
  kiln_model *model = make_model(ctx, w.spec, dev);
  CHECK(kiln_model_set_training(model, 0));
  int64_t n;
  CHECK(kiln_dataset_size(test_set, &n));
  kiln_tensor *x, *y;
  CHECK(kiln_dataset_batch(test_set, 0, n, dev, &x, &y));
  const int64_t batches[] = {1, 64, 4096};
  printf("{\"impl\": \"kiln\", \"workload\": \"C\", \"model\": \"%c\", \"samples_per_second\": {", name);
  for (int i = 0; i < 3; ++i) {
    int64_t b = batches[i];
    /* Enough calls for a stable time, capped so batch 1 stays short. */
    int64_t samples = b == 1 ? 2000 : n;
    double t0 = now();
    int64_t done = 0;
    for (int64_t start = 0; done < samples; start = (start + b + b <= n) ? start + b : 0) {
      kiln_tensor *xb, *out;
      CHECK(kiln_tensor_rows(x, start, start + b, &xb));
      CHECK(kiln_model_forward(model, xb, &out));
      kiln_tensor_release(out);
      kiln_tensor_release(xb);
      done += b;
    }
    CHECK(kiln_device_synchronize(ctx, dev));
    printf("%s\"%lld\": %.1f", i ? ", " : "", (long long)b, done / (now() - t0));
  }
  printf("}, \"peak_rss_mib\": %.1f}\n", peak_rss_mib());
  kiln_tensor_release(x);
  kiln_tensor_release(y);
  kiln_model_release(model);
  kiln_dataset_release(test_set);
}

int main(int argc, char **argv) {
  char workload = 'A', model = 'A';
  int epochs = 3, distributed = 0;
  int64_t threads = 0, batch = 0;
  uint64_t seed = 1;
  const char *device = "cpu", *data = "/usr/share/datasets/fashion-mnist";
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) { fprintf(stderr, "kiln_bench: %s needs a value\n", a); return 2; }
    if (!strcmp(a, "--workload")) workload = v[0];
    else if (!strcmp(a, "--model")) model = v[0];
    else if (!strcmp(a, "--epochs")) epochs = atoi(v);
    else if (!strcmp(a, "--threads")) threads = atoll(v);
    else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--device")) device = v;
    else if (!strcmp(a, "--data")) data = v;
    else if (!strcmp(a, "--distributed")) distributed = atoi(v);
    else if (!strcmp(a, "--batch-per-rank")) batch = atoll(v);
    else { fprintf(stderr, "kiln_bench: unknown flag %s\n", a); return 2; }
    ++i;
  }
  if (epochs < 1) { fprintf(stderr, "kiln_bench: --epochs must be >= 1\n"); return 2; }
  kiln_context_options *copts;
  kiln_context *ctx;
  CHECK(kiln_context_options_create(&copts));
  CHECK(kiln_context_options_set_num_threads(copts, threads));
  CHECK(kiln_context_options_set_seed(copts, seed));
  CHECK(kiln_context_create(copts, &ctx));
  kiln_context_options_release(copts);
  kiln_device dev;
  CHECK(kiln_device_parse(ctx, device, &dev));
  if (workload == 'C') infer(ctx, dev, model, data);
  else {
    kiln_communicator *comm = NULL;
    if (distributed) CHECK(kiln_communicator_create_mpi(ctx, &comm));
    train(ctx, dev, workload, epochs, data, comm, batch);
    kiln_communicator_release(comm);
  }
  kiln_context_release(ctx);
  return 0;
}
