/* One benchmark run of kiln, printed as one JSON object on stdout.
 *
 *   kiln_bench --workload A|B --epochs N [--warmup E] [--batch N] [--precision P] [--fast-path N] [--programs 1]
 *              [--device D] [--threads T] [--seed S] [--data DIR]
 *   kiln_bench --workload C --model A|B [--device D] [--threads T] [--data DIR]
 *   mpirun -np N kiln_bench --workload A|B --epochs N --distributed 1 [...]
 *       DDP over the MPI job: --batch-per-rank B (as --batch; default the
 *       workload's batch) on every rank (--device cuda: cuda:<local rank>),
 *       --bucket-bytes N its gradient
 *       buckets (default 0: one allreduce); rank 0 prints, samples/s count
 *       every rank's samples.
 *   kiln_bench --workload W [--spec S] [--batch N] [--steps N] [--windows N] [--precision P]
 *              [--fast-path N] [--profile-steps N] [--device D] [--seed S]
 *
 * A: 784-32-10 ReLU, SGD lr 0.1, batch 128.  B: 784-1024-1024-10 ReLU, SGD
 * lr 0.1, batch 256 (--batch changes it; bench/run.py uses 1024 on a GPU).
 * Training runs --warmup untimed epochs (default 1) first, so that lazy
 * loading and first-use costs stay out of the timed epochs; each timed epoch
 * includes its shuffle and ends with a device synchronisation.
 * C: inference of A's or B's model at batch 1, 64 and 4096 over the test set:
 * samples/s over a stream of calls, and the median latency of one call
 * (forward + synchronize).
 * W: training step time on a synthetic batch resident on the device (default
 * spec 4096-4096-4096-4096-4096-10, batch 8192): --windows windows of --steps
 * steps, each window synchronised; the median per-step time is reported with
 * the model's parameter count, so the caller can count 6 x params x batch FLOPs.
 * --profile-steps N runs N more steps after the warm-up between cuProfilerStart
 * and cuProfilerStop (scripts/gpu-check.sh's ncu summary of one step).
 * --precision fp32|tf32|bf16 and --fast-path N (kiln_fast_path bits; default
 * the library's, epilogues and graphs without cuDNN) go to the trainer options.
 * --programs 1 (A and B) adds "programs": what each compiled step program
 * runs on, from the context's debug log ("compiled LABEL: ..."): with cuDNN
 * on, each Linear op's choice and both timings. bench/run.py drives it next
 * to PyTorch. */
#include <kiln/kiln.h>

#include <dlfcn.h>
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

/* CPU time of the whole process (every thread): with one thread, the cost of
 * the work itself even when a busy machine delays it (wall time does not). */
static double process_cpu(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
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

/* The median of v[0..n) (v is sorted in place). */
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The "compiled ..." lines of the context's debug log (--programs), in order;
 * every other record at WARNING or above goes to stderr, as without a
 * callback. */
enum { MAX_PROGRAMS = 32 };
static char *programs[MAX_PROGRAMS];
static int program_count;

static int keep_programs(void *user, const kiln_log_record *r) {
  (void)user;
  if (!strncmp(r->message, "compiled ", 9)) {
    if (program_count < MAX_PROGRAMS) programs[program_count++] = strdup(r->message);
  } else if (r->level >= KILN_LOG_WARNING) {
    fprintf(stderr, "kiln: %s\n", r->message);
  }
  return 0;
}

/* s as a JSON string. */
static void print_json_string(const char *s) {
  putchar('"');
  for (; *s; ++s) {
    if (*s == '"' || *s == '\\') printf("\\%c", *s);
    else if ((unsigned char)*s < 0x20) printf("\\u%04x", *s);
    else putchar(*s);
  }
  putchar('"');
}

/* What a run was asked for, beyond the workload itself. */
struct options {
  char workload, model;
  int epochs, warmup, steps, windows, profile_steps, distributed, programs;
  int64_t batch;        /* 0: the workload's own */
  int64_t bucket_bytes; /* data parallel gradient buckets; 0: one allreduce */
  kiln_precision precision;
  const char *precision_name;
  uint32_t fast_path;
  const char *spec, *data;
};

struct workload {
  const char *spec;
  int64_t batch;
};

static struct workload workload_of(char name) {
  if (name == 'A') return (struct workload){"784-32-10", 128};
  if (name == 'B') return (struct workload){"784-1024-1024-10", 256};
  if (name == 'W') return (struct workload){"4096-4096-4096-4096-4096-10", 8192};
  fprintf(stderr, "kiln_bench: unknown workload %c (A, B or W)\n", name);
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

static kiln_trainer *make_trainer(kiln_model *model, const struct options *o, int64_t batch) {
  kiln_trainer_options *opts;
  kiln_trainer *trainer;
  CHECK(kiln_trainer_options_create(&opts));
  CHECK(kiln_trainer_options_set_lr(opts, 0.1));
  CHECK(kiln_trainer_options_set_batch_size(opts, batch));
  CHECK(kiln_trainer_options_set_precision(opts, o->precision));
  CHECK(kiln_trainer_options_set_fast_path(opts, o->fast_path));
  CHECK(kiln_trainer_options_set_bucket_bytes(opts, o->bucket_bytes));
  CHECK(kiln_trainer_create(model, opts, &trainer));
  kiln_trainer_options_release(opts);
  return trainer;
}

static void train(kiln_context *ctx, kiln_device dev, const struct options *o, kiln_communicator *comm) {
  struct workload w = workload_of(o->workload);
  int64_t batch = o->batch ? o->batch : w.batch;
  int64_t rank = 0, ranks = 1;
  if (comm) {
    CHECK(kiln_communicator_rank(comm, &rank));
    CHECK(kiln_communicator_size(comm, &ranks));
  }
  kiln_dataset *train_set, *test_set;
  CHECK(kiln_dataset_load_mnist(ctx, o->data, "train", &train_set));
  CHECK(kiln_dataset_load_mnist(ctx, o->data, "test", &test_set));
  kiln_model *model = make_model(ctx, o->spec ? o->spec : w.spec, dev);
  kiln_trainer *trainer = make_trainer(model, o, batch);
  if (comm) CHECK(kiln_trainer_attach_communicator(trainer, comm));

  int epochs = o->epochs > 64 ? 64 : o->epochs;
  double seconds[64], cpu_seconds[64];
  int64_t n;
  CHECK(kiln_dataset_size(train_set, &n));
  for (int e = -o->warmup; e < epochs; ++e) {
    kiln_epoch_stats stats = {.struct_size = sizeof stats};
    double t0 = now(), c0 = process_cpu();
    CHECK(kiln_trainer_epoch(trainer, train_set, &stats));
    CHECK(kiln_device_synchronize(ctx, dev));
    if (e >= 0) seconds[e] = now() - t0, cpu_seconds[e] = process_cpu() - c0;
  }
  double loss, acc;
  CHECK(kiln_trainer_evaluate(trainer, test_set, &loss, &acc));
  if (rank != 0) goto done;
  printf("{\"impl\": \"kiln\", \"workload\": \"%c\", \"precision\": \"%s\", \"ranks\": %lld, "
         "\"batch\": %lld, \"batch_per_rank\": %lld, \"bucket_bytes\": %lld, \"warmup_epochs\": %d, \"epochs\": %d, "
         "\"epoch_seconds\": [",
         o->workload, o->precision_name, (long long)ranks, (long long)(batch * ranks), (long long)batch,
         (long long)o->bucket_bytes, o->warmup, epochs);
  for (int e = 0; e < epochs; ++e) printf("%s%.6f", e ? ", " : "", seconds[e]);
  printf("], \"epoch_cpu_seconds\": [");
  for (int e = 0; e < epochs; ++e) printf("%s%.6f", e ? ", " : "", cpu_seconds[e]);
  double med = median(seconds, epochs);
  printf("], \"median_epoch_seconds\": %.6f, \"median_epoch_cpu_seconds\": %.6f, \"samples_per_second\": %.1f, "
         "\"test_accuracy\": %.4f, \"peak_rss_mib\": %.1f",
         med, median(cpu_seconds, epochs), (double)n / med, acc, peak_rss_mib());
  if (o->programs) {
    printf(", \"programs\": [");
    for (int i = 0; i < program_count; ++i) {
      if (i) printf(", ");
      print_json_string(programs[i]);
      free(programs[i]);
    }
    program_count = 0;
    printf("]");
  }
  printf("}\n");
done:
  kiln_trainer_release(trainer);
  kiln_model_release(model);
  kiln_dataset_release(train_set);
  kiln_dataset_release(test_set);
}

/* cuProfilerStart / cuProfilerStop from the driver (libcuda.so.1), for
 * `ncu --profile-from-start off`: kiln's plugin links the CUDA runtime
 * statically and exports none of it. */
static void profiler(int start) {
  void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!cuda) cuda = dlopen("libcuda.so.1", RTLD_NOW);
  int (*fn)(void) = cuda ? (int (*)(void))dlsym(cuda, start ? "cuProfilerStart" : "cuProfilerStop") : NULL;
  if (!fn || fn() != 0) fprintf(stderr, "kiln_bench: cuProfiler%s unavailable\n", start ? "Start" : "Stop");
}

/* Training steps on one synthetic batch already on the device. */
static void steps(kiln_context *ctx, kiln_device dev, const struct options *o) {
  struct workload w = workload_of('W');
  const char *spec = o->spec ? o->spec : w.spec;
  int64_t batch = o->batch ? o->batch : w.batch;
  kiln_model *model = make_model(ctx, spec, dev);
  kiln_trainer *trainer = make_trainer(model, o, batch);
  /* Features and classes from the spec's first and last numbers. */
  int64_t features = atoll(spec);
  const char *last = strrchr(spec, '-');
  int64_t classes = last ? atoll(last + 1) : 10;
  int64_t xshape[2] = {batch, features};
  kiln_tensor *x, *y;
  CHECK(kiln_tensor_randn(ctx, xshape, 2, KILN_F32, dev, &x));
  int64_t *labels = malloc((size_t)batch * sizeof *labels);
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (int64_t i = 0; i < batch; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    labels[i] = (int64_t)((state >> 33) % (uint64_t)classes);
  }
  CHECK(kiln_tensor_from_host(ctx, labels, batch * (int64_t)sizeof *labels, &batch, 1, KILN_I64, dev, &y));
  free(labels);
  int64_t params;
  CHECK(kiln_model_num_parameters(model, &params));

  for (int i = 0; i < 5; ++i) CHECK(kiln_trainer_step(trainer, x, y, NULL)); /* warm-up */
  CHECK(kiln_device_synchronize(ctx, dev));
  if (o->profile_steps > 0) { /* only these steps, for a profiler */
    profiler(1);
    for (int i = 0; i < o->profile_steps; ++i) CHECK(kiln_trainer_step(trainer, x, y, NULL));
    CHECK(kiln_device_synchronize(ctx, dev));
    profiler(0);
  }
  int windows = o->windows > 64 ? 64 : o->windows;
  double per_step[64];
  for (int r = 0; r < windows; ++r) {
    double t0 = now();
    for (int i = 0; i < o->steps; ++i) CHECK(kiln_trainer_step(trainer, x, y, NULL));
    CHECK(kiln_device_synchronize(ctx, dev));
    per_step[r] = (now() - t0) / o->steps;
  }
  double loss;
  CHECK(kiln_trainer_step(trainer, x, y, &loss));
  printf("{\"impl\": \"kiln\", \"workload\": \"W\", \"spec\": \"%s\", \"precision\": \"%s\", \"batch\": %lld, "
         "\"parameters\": %lld, \"steps_per_window\": %d, \"step_seconds\": [",
         spec, o->precision_name, (long long)batch, (long long)params, o->steps);
  for (int r = 0; r < windows; ++r) printf("%s%.7f", r ? ", " : "", per_step[r]);
  double med = median(per_step, windows);
  printf("], \"median_step_seconds\": %.7f, \"samples_per_second\": %.1f, \"final_loss\": %.4f, "
         "\"peak_rss_mib\": %.1f}\n",
         med, (double)batch / med, loss, peak_rss_mib());
  kiln_tensor_release(x);
  kiln_tensor_release(y);
  kiln_trainer_release(trainer);
  kiln_model_release(model);
}

static void infer(kiln_context *ctx, kiln_device dev, const struct options *o) {
  struct workload w = workload_of(o->model);
  kiln_dataset *test_set;
  CHECK(kiln_dataset_load_mnist(ctx, o->data, "test", &test_set));
  kiln_model *model = make_model(ctx, o->spec ? o->spec : w.spec, dev);
  CHECK(kiln_model_set_training(model, 0));
  int64_t n;
  CHECK(kiln_dataset_size(test_set, &n));
  kiln_tensor *x, *y;
  CHECK(kiln_dataset_batch(test_set, 0, n, dev, &x, &y));
  const int64_t batches[] = {1, 64, 4096};
  double rate[3], latency[3];
  for (int i = 0; i < 3; ++i) {
    int64_t b = batches[i];
    /* Warm-up calls, then enough calls for a stable time, capped so batch 1
     * stays short. */
    for (int k = 0; k < 3; ++k) {
      kiln_tensor *xb, *out;
      CHECK(kiln_tensor_rows(x, 0, b, &xb));
      CHECK(kiln_model_forward(model, xb, &out));
      kiln_tensor_release(out);
      kiln_tensor_release(xb);
    }
    CHECK(kiln_device_synchronize(ctx, dev));
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
    rate[i] = done / (now() - t0);
    /* Latency: one call and its synchronisation, median of many. */
    double lat[101];
    int calls = b == 4096 ? 21 : 101;
    for (int k = 0; k < calls; ++k) {
      kiln_tensor *xb, *out;
      double t1 = now();
      CHECK(kiln_tensor_rows(x, 0, b, &xb));
      CHECK(kiln_model_forward(model, xb, &out));
      CHECK(kiln_device_synchronize(ctx, dev));
      lat[k] = now() - t1;
      kiln_tensor_release(out);
      kiln_tensor_release(xb);
    }
    latency[i] = median(lat, calls);
  }
  printf("{\"impl\": \"kiln\", \"workload\": \"C\", \"model\": \"%c\", \"samples_per_second\": {", o->model);
  for (int i = 0; i < 3; ++i) printf("%s\"%lld\": %.1f", i ? ", " : "", (long long)batches[i], rate[i]);
  printf("}, \"latency_seconds\": {");
  for (int i = 0; i < 3; ++i) printf("%s\"%lld\": %.8f", i ? ", " : "", (long long)batches[i], latency[i]);
  printf("}, \"peak_rss_mib\": %.1f}\n", peak_rss_mib());
  kiln_tensor_release(x);
  kiln_tensor_release(y);
  kiln_model_release(model);
  kiln_dataset_release(test_set);
}

int main(int argc, char **argv) {
  struct options o = {.workload = 'A', .model = 'A', .epochs = 3, .warmup = 1, .steps = 20, .windows = 7,
                      .precision = KILN_PRECISION_FP32, .precision_name = "fp32",
                      .fast_path = KILN_FAST_PATH_EPILOGUES | KILN_FAST_PATH_GRAPHS, .data = "/usr/share/datasets/fashion-mnist"};
  int64_t threads = 0;
  uint64_t seed = 1;
  const char *device = "cpu";
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) { fprintf(stderr, "kiln_bench: %s needs a value\n", a); return 2; }
    if (!strcmp(a, "--workload")) o.workload = v[0];
    else if (!strcmp(a, "--model")) o.model = v[0];
    else if (!strcmp(a, "--epochs")) o.epochs = atoi(v);
    else if (!strcmp(a, "--warmup")) o.warmup = atoi(v);
    else if (!strcmp(a, "--batch") || !strcmp(a, "--batch-per-rank")) o.batch = atoll(v);
    else if (!strcmp(a, "--distributed")) o.distributed = atoi(v);
    else if (!strcmp(a, "--bucket-bytes")) o.bucket_bytes = atoll(v);
    else if (!strcmp(a, "--spec")) o.spec = v;
    else if (!strcmp(a, "--steps")) o.steps = atoi(v);
    else if (!strcmp(a, "--windows")) o.windows = atoi(v);
    else if (!strcmp(a, "--profile-steps")) o.profile_steps = atoi(v);
    else if (!strcmp(a, "--fast-path")) o.fast_path = (uint32_t)strtoul(v, NULL, 0);
    else if (!strcmp(a, "--programs")) o.programs = atoi(v);
    else if (!strcmp(a, "--precision")) {
      o.precision_name = v;
      if (!strcmp(v, "fp32")) o.precision = KILN_PRECISION_FP32;
      else if (!strcmp(v, "tf32")) o.precision = KILN_PRECISION_TF32;
      else if (!strcmp(v, "bf16")) o.precision = KILN_PRECISION_BF16;
      else { fprintf(stderr, "kiln_bench: --precision is fp32, tf32 or bf16\n"); return 2; }
    }
    else if (!strcmp(a, "--threads")) threads = atoll(v);
    else if (!strcmp(a, "--seed")) seed = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--device")) device = v;
    else if (!strcmp(a, "--data")) o.data = v;
    else { fprintf(stderr, "kiln_bench: unknown flag %s\n", a); return 2; }
    ++i;
  }
  if (o.epochs < 1 || o.warmup < 0 || o.steps < 1 || o.windows < 1 || o.batch < 0) {
    fprintf(stderr, "kiln_bench: --epochs, --steps and --windows must be >= 1, --warmup and --batch >= 0\n");
    return 2;
  }
  kiln_context_options *copts;
  kiln_context *ctx;
  CHECK(kiln_context_options_create(&copts));
  CHECK(kiln_context_options_set_num_threads(copts, threads));
  CHECK(kiln_context_options_set_seed(copts, seed));
  if (o.programs) {
    CHECK(kiln_context_options_set_log_level(copts, KILN_LOG_DEBUG));
    CHECK(kiln_context_options_set_log_callback(copts, keep_programs, NULL));
  }
  CHECK(kiln_context_create(copts, &ctx));
  kiln_context_options_release(copts);
  kiln_device dev;
  CHECK(kiln_device_parse(ctx, device, &dev));
  if (o.workload == 'C') infer(ctx, dev, &o);
  else if (o.workload == 'W') steps(ctx, dev, &o);
  else {
    kiln_communicator *comm = NULL;
    if (o.distributed) {
      CHECK(kiln_communicator_create_mpi(ctx, &comm));
      /* --device cuda under mpirun: each rank on its own GPU, as kiln train does. */
      int64_t local = 0;
      CHECK(kiln_communicator_local_rank(comm, &local));
      if (dev.kind == KILN_DEVICE_CUDA && strcmp(device, "cuda") == 0) dev.index = local;
    }
    train(ctx, dev, &o, comm);
    kiln_communicator_release(comm);
  }
  kiln_context_release(ctx);
  return 0;
}
