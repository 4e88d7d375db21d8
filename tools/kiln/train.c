/* kiln train: the PyTorch GPU tutorial's training run (an MLP trained with
 * cross-entropy over shuffled batches, validated each epoch, then scored on
 * the test set) on any MNIST-layout dataset. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "common.h"
#include "progress.h"
#include "trainer_flags.h"

#define MAX_HIDDEN_LAYERS 16
#define EXIT_INTERRUPTED 130 /* 128 + SIGINT, as shells report it */

typedef struct train_args {
  const char *data, *device, *hidden, *activation, *save, *checkpoint, *resume;
  int64_t epochs, seed, threads;
  double val_split;
  int quiet, distributed;
  /* --lr, --batch, --optimizer, ...: the trainer options table's flags. */
  trainer_flags options;
  /* Derived from the above by check_args. */
  int64_t hidden_sizes[MAX_HIDDEN_LAYERS];
  int num_hidden;
  kiln_layer_kind activation_kind;
  kiln_trainer_options *trainer_options; /* the caller releases it */
  int64_t batch; /* per device, per rank with --distributed */
  /* --device cuda:0,cuda:1: DataParallel over these; first_device is the
   * model's (num_devices 0: one device, --device as given). */
  kiln_device devices[KILN_MAX_DATA_PARALLEL_DEVICES];
  int64_t num_devices;
  char first_device[64];
  const char *device_list;
} train_args;

/* Everything a run creates, released in one place. */
typedef struct train_run {
  kiln_context *ctx;
  kiln_device device;
  kiln_dataset *full, *train, *val, *test;
  kiln_model *model;
  kiln_trainer *trainer;
  kiln_communicator *comm; /* --distributed only */
  int64_t rank, ranks;      /* 0 and 1 without --distributed */
} train_run;

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int parse_hidden(const cli_command *cmd, train_args *a) {
  const char *p = a->hidden;
  a->num_hidden = 0;
  while (*p) {
    char *end = NULL;
    long long v = strtoll(p, &end, 10);
    if (end == p || v <= 0 || (*end != ',' && *end != '\0') || a->num_hidden == MAX_HIDDEN_LAYERS)
      return cli_usage_error(cmd, "--hidden wants up to %d positive sizes separated by commas, got '%s'",
                             MAX_HIDDEN_LAYERS, a->hidden);
    a->hidden_sizes[a->num_hidden++] = v;
    p = *end == ',' ? end + 1 : end;
  }
  return CLI_CONTINUE;
}

/* --device cuda:0,cuda:1,...: DataParallel over those GPUs of this process.
 * The syntax is checked here; whether the GPUs exist, when the trainer is
 * created. */
static int parse_device_list(const cli_command *cmd, train_args *a) {
  if (a->distributed)
    return cli_usage_error(cmd, "--device '%s': --distributed runs one device per rank; list no devices with it",
                           a->device);
  const char *p = a->device;
  a->num_devices = 0;
  while (*p) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    char one[64];
    if (len == 0 || (end && end[1] == '\0') || len >= sizeof one || a->num_devices == KILN_MAX_DATA_PARALLEL_DEVICES)
      return cli_usage_error(cmd, "--device '%s': list up to %d devices as cuda:0,cuda:1,...", a->device,
                             KILN_MAX_DATA_PARALLEL_DEVICES);
    memcpy(one, p, len);
    one[len] = '\0';
    kiln_device d;
    if (kiln_device_parse(NULL, one, &d) != KILN_OK || d.kind != KILN_DEVICE_CUDA || d.index < 0)
      return cli_usage_error(cmd, "--device '%s': '%s' is not a GPU (cuda:N); DataParallel lists GPUs only",
                             a->device, one);
    for (int64_t i = 0; i < a->num_devices; i++)
      if (a->devices[i].index == d.index) return cli_usage_error(cmd, "--device '%s': %s is listed twice", a->device, one);
    if (a->num_devices == 0) memcpy(a->first_device, one, len + 1);
    a->devices[a->num_devices++] = d;
    p = end ? end + 1 : p + len;
  }
  a->device_list = a->device;
  a->device = a->first_device;
  return CLI_CONTINUE;
}

static int check_args(const cli_command *cmd, train_args *a) {
  static const struct { const char *name; kiln_layer_kind kind; } activations[] = {
      {"relu", KILN_LAYER_RELU}, {"gelu", KILN_LAYER_GELU},         {"tanh", KILN_LAYER_TANH},
      {"sigmoid", KILN_LAYER_SIGMOID}, {"leaky_relu", KILN_LAYER_LEAKY_RELU}, {"elu", KILN_LAYER_ELU},
      {"selu", KILN_LAYER_SELU}, {"softplus", KILN_LAYER_SOFTPLUS}};

  int found = 0;
  for (size_t i = 0; i < sizeof activations / sizeof activations[0]; i++)
    if (strcmp(a->activation, activations[i].name) == 0) {
      a->activation_kind = activations[i].kind;
      found = 1;
    }
  if (!found)
    return cli_usage_error(cmd, "unknown --activation '%s' (relu, gelu, tanh, sigmoid, leaky_relu, elu, selu or "
                                "softplus)", a->activation);

  if (strchr(a->device, ',')) {
    int rc = parse_device_list(cmd, a);
    if (rc != CLI_CONTINUE) return rc;
  }
  if (a->epochs < 1) return cli_usage_error(cmd, "--epochs must be at least 1, got %lld", (long long)a->epochs);
  if (a->threads < 0) return cli_usage_error(cmd, "--threads must be 0 (one per core) or more");
  if (a->seed < 0) return cli_usage_error(cmd, "--seed must not be negative");
  /* Every value's range is the library's: each goes through its setter. */
  int rc = trainer_flags_options(cmd, &a->options, &a->trainer_options);
  if (rc != CLI_CONTINUE) return rc;
  a->batch = (int64_t)trainer_flag_number(&a->options, "batch");
  if (trainer_flag_number(&a->options, "momentum") > 0 && strcmp(trainer_flag_name(&a->options, "optimizer"), "sgd"))
    return cli_usage_error(cmd, "--momentum applies to --optimizer sgd only");
  if (trainer_flag_number(&a->options, "bucket-mb") > 0 && !a->distributed && a->num_devices < 2)
    return cli_usage_error(cmd, "--bucket-mb applies to data parallel training (--distributed, or --device "
                                "cuda:0,cuda:1,...)");
  if (a->val_split < 0 || a->val_split >= 1) return cli_usage_error(cmd, "--val-split must be in [0, 1)");
  return parse_hidden(cmd, a);
}

static int load_data(const cli_command *cmd, const train_args *a, train_run *r) {
  int rc = load_split(cmd, r->ctx, a->data, "train", &r->full);
  if (rc == CLI_CONTINUE) rc = load_split(cmd, r->ctx, a->data, "test", &r->test);
  if (rc != CLI_CONTINUE) return rc;
  if (a->val_split == 0) {
    r->train = r->full;
    r->full = NULL;
  } else if (kiln_dataset_split(r->full, a->val_split, (uint64_t)a->seed, &r->train, &r->val) != KILN_OK) {
    return report_error(cmd, "cannot split off the validation set");
  }
  return CLI_CONTINUE;
}

static int build_model(const cli_command *cmd, const train_args *a, train_run *r) {
  int64_t sizes[MAX_HIDDEN_LAYERS + 2];
  int n = 0;
  if (kiln_dataset_num_features(r->train, &sizes[n++]) != KILN_OK)
    return report_error(cmd, "cannot read the dataset's shape");
  for (int i = 0; i < a->num_hidden; i++) sizes[n++] = a->hidden_sizes[i];
  if (kiln_dataset_num_classes(r->train, &sizes[n++]) != KILN_OK)
    return report_error(cmd, "cannot read the dataset's classes");

  kiln_model_spec *spec = NULL;
  kiln_status st = kiln_model_spec_create(&spec);
  if (st == KILN_OK) st = kiln_model_spec_add_mlp(spec, sizes, n, a->activation_kind);
  if (st == KILN_OK) st = kiln_model_create(r->ctx, spec, r->device, &r->model);
  kiln_model_spec_release(spec);
  if (st != KILN_OK) return report_error(cmd, "cannot create the model");
  return CLI_CONTINUE;
}

static int make_trainer(const cli_command *cmd, const train_args *a, train_run *r, int64_t progress_interval) {
  kiln_trainer_options *o = a->trainer_options; /* the table's flags, set by check_args */
  kiln_status st = kiln_trainer_options_set_shuffle_seed(o, (uint64_t)a->seed);
  if (st == KILN_OK) st = kiln_trainer_options_set_progress_interval(o, progress_interval);
  if (st == KILN_OK && a->num_devices > 1) st = kiln_trainer_options_set_devices(o, a->devices, a->num_devices);
  if (st == KILN_OK) st = kiln_trainer_create(r->model, o, &r->trainer);
  if (st != KILN_OK) return report_error(cmd, "cannot create the trainer");
  /* Every rank resumes the same checkpoint, then attaching checks that the
   * ranks agree and starts them all from rank 0's state. */
  if (a->resume && kiln_trainer_load_checkpoint(r->trainer, a->resume) != KILN_OK) {
    fprintf(stderr,
            "kiln train: cannot resume from '%s': %s (pass the same --hidden, --activation and --optimizer "
            "as the run that wrote it)\n",
            a->resume, kiln_last_error());
    return EXIT_RUNTIME_ERROR;
  }
  if (r->comm && kiln_trainer_attach_communicator(r->trainer, r->comm) != KILN_OK)
    return report_error(cmd, "cannot start distributed training");
  return CLI_CONTINUE;
}

/* Joins the MPI job (--distributed): every rank runs this same command. With
 * --device cuda (or auto finding a GPU) each rank takes the GPU of its local
 * rank, as torchrun's LOCAL_RANK convention does. */
static int join_job(const cli_command *cmd, const train_args *a, train_run *r) {
  if (kiln_communicator_create_mpi(r->ctx, &r->comm) != KILN_OK ||
      kiln_communicator_rank(r->comm, &r->rank) != KILN_OK || kiln_communicator_size(r->comm, &r->ranks) != KILN_OK)
    return report_error(cmd, "cannot join the MPI job (--distributed)");
  int64_t local = 0;
  if (kiln_communicator_local_rank(r->comm, &local) != KILN_OK) return report_error(cmd, "cannot read the local rank");
  int any_gpu = strcmp(a->device, "cuda") == 0 || (strcmp(a->device, "auto") == 0 && r->device.kind == KILN_DEVICE_CUDA);
  if (any_gpu) {
    r->device.index = local;
    kiln_device_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    if (kiln_device_get_info(r->ctx, r->device, &info) != KILN_OK) {
      fprintf(stderr, "kiln train: rank %lld (local rank %lld) has no GPU cuda:%lld: %s\n", (long long)r->rank,
              (long long)local, (long long)local, kiln_last_error());
      return EXIT_RUNTIME_ERROR;
    }
  }
  return CLI_CONTINUE;
}

/* --threads 0 under mpirun: the machine's cores shared by its ranks (Open
 * MPI tells each process how many ranks its machine runs). */
static int64_t default_threads(const train_args *a) {
  if (a->threads > 0 || !a->distributed) return a->threads;
  const char *local_size = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  long ranks = local_size ? atol(local_size) : 1;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (ranks <= 1 || cores < 1) return 0;
  return cores / ranks > 0 ? cores / ranks : 1;
}

static void print_header(const train_args *a, const train_run *r) {
  char dev[320];
  describe_device(r->ctx, r->device, dev, sizeof dev);
  const char *spec = "?";
  int64_t params = 0, n_train = 0, n_val = 0, n_test = 0;
  /* Figures for the header only: one that cannot be read shows as ? or 0. */
  if (kiln_model_describe(r->model, &spec) != KILN_OK) spec = "?";
  if (kiln_model_num_parameters(r->model, &params) != KILN_OK) params = 0;
  if (kiln_dataset_size(r->train, &n_train) != KILN_OK) n_train = 0;
  if (r->val && kiln_dataset_size(r->val, &n_val) != KILN_OK) n_val = 0;
  if (kiln_dataset_size(r->test, &n_test) != KILN_OK) n_test = 0;
  printf("device: %s\n", dev);
  /* auto on the CPU: say why not the GPU (no driver, none visible, ...). */
  const char *why = NULL;
  if (strcmp(a->device, "auto") == 0 && r->device.kind == KILN_DEVICE_CPU &&
      kiln_cuda_unavailable_reason(r->ctx, &why) == KILN_OK && why && *why)
    printf("no GPU: %s\n", why);
  printf("model: %s (%lld parameters)\n", spec, (long long)params);
  printf("data: %s: %lld training, %lld validation, %lld test samples\n", a->data, (long long)n_train,
         (long long)n_val, (long long)n_test);
  printf("training: %s, lr %g, batch %lld, epochs %lld, precision %s\n", trainer_flag_name(&a->options, "optimizer"),
         trainer_flag_number(&a->options, "lr"), (long long)a->batch, (long long)a->epochs,
         trainer_flag_name(&a->options, "precision"));
  if (a->num_devices > 1)
    printf("data parallel: %lld GPUs (%s), batch %lld per GPU (%lld per step in all)\n", (long long)a->num_devices,
           a->device_list, (long long)a->batch, (long long)(a->batch * a->num_devices));
  if (r->comm)
    printf("distributed: %lld ranks, batch %lld per rank (%lld per step in all); rank 0 reports\n",
           (long long)r->ranks, (long long)a->batch, (long long)(a->batch * r->ranks));
  fflush(stdout);
}

/* Runs the remaining epochs one fit at a time, so that a checkpoint can be
 * written between epochs without touching the trainer during a fit. */
static int run_epochs(const cli_command *cmd, const train_args *a, train_run *r, progress_state *progress) {
  int64_t done = 0;
  if (kiln_trainer_epochs_done(r->trainer, &done) != KILN_OK) return report_error(cmd, "cannot read the trainer");
  if (done >= a->epochs && !a->quiet && r->rank == 0)
    printf("the checkpoint has %lld epochs already; nothing to train (raise --epochs)\n", (long long)done);
  for (int64_t e = done + 1; e <= a->epochs; e++) {
    progress->epoch = e;
    kiln_history *history = NULL;
    kiln_status st = kiln_trainer_fit(r->trainer, r->train, r->val, 1, progress_callback, progress, &history);
    kiln_history_release(history);
    if (st == KILN_ERROR_CANCELLED && progress_interrupted()) {
      if (progress->mode == PROGRESS_BAR) printf("\n"); /* end the bar's line */
      fprintf(stderr, "kiln train: interrupted during epoch %lld\n", (long long)e);
      return EXIT_INTERRUPTED;
    }
    if (st != KILN_OK) return report_error(cmd, "training failed");
    if (a->checkpoint && kiln_trainer_save_checkpoint(r->trainer, a->checkpoint) != KILN_OK) {
      char what[512];
      snprintf(what, sizeof what, "cannot write checkpoint '%s'", a->checkpoint);
      return report_error(cmd, what);
    }
  }
  return CLI_CONTINUE;
}

static int finish(const cli_command *cmd, const train_args *a, train_run *r, double started, double train_seconds) {
  if (a->save && r->rank == 0) { /* the ranks hold the same weights: one file */
    if (kiln_model_save(r->model, a->save) != KILN_OK) {
      char what[512];
      snprintf(what, sizeof what, "cannot save the model to '%s'", a->save);
      return report_error(cmd, what);
    }
    printf("saved model: %s\n", a->save);
  }
  double loss = 0, accuracy = 0;
  if (kiln_trainer_evaluate(r->trainer, r->test, &loss, &accuracy) != KILN_OK)
    return report_error(cmd, "cannot evaluate on the test set");
  if (r->rank != 0) return 0;
  printf("test loss: %.4f\n", loss);
  printf("test accuracy: %.2f%%\n", 100.0 * accuracy);
  printf("time: %.1f s training, %.1f s in all\n", train_seconds, now_seconds() - started);
  return 0;
}

int cmd_train(int argc, char **argv) {
  train_args a = {.data = DEFAULT_DATA_DIR, .device = "auto", .hidden = "32", .activation = "relu", .epochs = 5,
                  .val_split = 0.1};
  trainer_flags_init(&a.options);
  trainer_flags_preset(&a.options, "lr", 0.1); /* the tutorial's */
  trainer_flags_preset(&a.options, "batch", 128);
  enum { MAX_OPTIONS = 48 };
  cli_option options[MAX_OPTIONS] = {
      {"data", CLI_STRING, &a.data, "DIR", "MNIST-layout dataset directory (default " DEFAULT_DATA_DIR ")"},
      {"device", CLI_STRING, &a.device, "DEV",
       "auto, cpu, cuda:N, or cuda:0,cuda:1,... for DataParallel over those GPUs (default auto: the first GPU, "
       "else the CPU)"},
      {"hidden", CLI_STRING, &a.hidden, "N[,N...]", "hidden layer sizes (default 32)"},
      {"activation", CLI_STRING, &a.activation, "NAME",
       "relu, gelu, tanh, sigmoid, leaky_relu (slope 0.01), elu (alpha 1), selu or softplus (beta 1, threshold "
       "20), with PyTorch's defaults (default relu)"},
      {"epochs", CLI_INT, &a.epochs, "N", "total epochs, counting those of a resumed checkpoint (default 5)"},
      {"seed", CLI_INT, &a.seed, "N", "seed of initialisation, split and shuffling (default 0)"},
      {"val-split", CLI_DOUBLE, &a.val_split, "X", "fraction held out for validation (default 0.1; 0 = none)"},
      {"save", CLI_STRING, &a.save, "FILE", "save the trained model's weights (safetensors)"},
      {"checkpoint", CLI_STRING, &a.checkpoint, "FILE", "write a training checkpoint after each epoch"},
      {"resume", CLI_STRING, &a.resume, "FILE", "continue from a checkpoint (same model and optimizer)"},
      {"threads", CLI_INT, &a.threads, "N", "CPU threads (default 0: one per core)"},
      {"quiet", CLI_FLAG, &a.quiet, NULL, "print only the results, no per-epoch output"},
      {"distributed", CLI_FLAG, &a.distributed, NULL,
       "one rank of data parallel training under mpirun (rank 0 prints and saves; --device cuda takes "
       "cuda:<local rank>)"},
  };
  int num_options = 13;
  trainer_flags_add_options(&a.options, options, &num_options, MAX_OPTIONS);
  cli_command cmd = {
      .name = "train",
      .synopsis = "",
      .summary = "Trains an MLP (input-hidden...-classes) with cross-entropy over shuffled batches,\n"
                 "validates it after each epoch and prints its test-set accuracy.",
      .options = options,
      .num_options = num_options,
  };
  int rc = cli_parse(&cmd, argc, argv);
  if (rc == CLI_CONTINUE) rc = check_args(&cmd, &a);
  if (rc != CLI_CONTINUE) {
    kiln_trainer_options_release(a.trainer_options);
    return rc;
  }

  double started = now_seconds();
  train_run r = {0};
  r.ranks = 1;
  rc = open_context(&cmd, a.device, (uint64_t)a.seed, default_threads(&a), &r.ctx, &r.device);
  if (rc == CLI_CONTINUE && a.distributed) rc = join_job(&cmd, &a, &r);
  progress_state progress = {progress_choose_mode(a.quiet || r.rank != 0), 0, a.epochs};
  if (rc == CLI_CONTINUE) rc = load_data(&cmd, &a, &r);
  if (rc == CLI_CONTINUE) rc = build_model(&cmd, &a, &r);
  if (rc == CLI_CONTINUE) {
    /* About 50 redraws per epoch; each reads the loss back from the device. */
    int64_t n = 0;
    if (kiln_dataset_size(r.train, &n) != KILN_OK) n = 0;
    n = (n + r.ranks - 1) / r.ranks; /* this rank's share */
    int64_t batches = (n + a.batch - 1) / a.batch;
    int64_t interval = progress.mode == PROGRESS_BAR ? (batches / 50 > 0 ? batches / 50 : 1) : 0;
    rc = make_trainer(&cmd, &a, &r, interval);
  }
  double train_seconds = 0;
  if (rc == CLI_CONTINUE) {
    if (!a.quiet && r.rank == 0) print_header(&a, &r);
    progress_catch_interrupt(1);
    double t0 = now_seconds();
    rc = run_epochs(&cmd, &a, &r, &progress);
    train_seconds = now_seconds() - t0;
    progress_catch_interrupt(0);
  }
  if (rc == CLI_CONTINUE) rc = finish(&cmd, &a, &r, started, train_seconds);

  kiln_trainer_options_release(a.trainer_options);
  kiln_trainer_release(r.trainer);
  kiln_communicator_release(r.comm);
  kiln_model_release(r.model);
  kiln_dataset_release(r.train);
  kiln_dataset_release(r.val);
  kiln_dataset_release(r.test);
  kiln_dataset_release(r.full);
  kiln_context_release(r.ctx);
  return rc;
}
