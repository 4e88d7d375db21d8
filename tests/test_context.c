/* Context options, contexts, seeding, logging, the CUDA plugin loader (its
 * reasons, and one plugin and backend per process shared by every context),
 * handle checks and the per-thread last error. */
#define _XOPEN_SOURCE 700

#include "support.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kiln/build_id.hpp" /* KILN_BUILD_ID: the plugin loader names it when it refuses another build */

extern char **environ;

static const kiln_device cpu = {KILN_DEVICE_CPU, -1};

/* Creates a context from options built by the caller, releasing them. */
static kiln_context *create_with(kiln_context_options *options) {
  kiln_context *ctx = NULL;
  kiln_status status = kiln_context_create(options, &ctx);
  kiln_context_options_release(options);
  assert_kiln_ok(status);
  return ctx;
}

static kiln_context_options *quiet_options(void) {
  kiln_context_options *options = NULL;
  assert_kiln_ok(kiln_context_options_create(&options));
  assert_kiln_ok(kiln_context_options_set_log_level(options, KILN_LOG_OFF));
  return options;
}

static const char *reason_of(kiln_context *ctx) {
  const char *reason = NULL;
  assert_kiln_ok(kiln_cuda_unavailable_reason(ctx, &reason));
  assert_non_null(reason);
  return reason;
}

/* ---- options ------------------------------------------------------------ */

static void test_options_defaults_and_setters(void **state) {
  (void)state;
  kiln_context_options *options = NULL;
  assert_kiln_ok(kiln_context_options_create(&options));
  assert_non_null(options);
  assert_kiln_ok(kiln_context_options_set_seed(options, UINT64_MAX));
  assert_kiln_ok(kiln_context_options_set_num_threads(options, 0));
  assert_kiln_ok(kiln_context_options_set_num_threads(options, 1));
  assert_kiln_ok(kiln_context_options_set_num_threads(options, 1024));
  for (int level = KILN_LOG_DEBUG; level <= KILN_LOG_OFF; ++level)
    assert_kiln_ok(kiln_context_options_set_log_level(options, (kiln_log_level)level));
  assert_kiln_ok(kiln_context_options_set_log_callback(options, NULL, NULL));
  assert_kiln_ok(kiln_context_options_set_enable_cuda(options, 0));
  assert_kiln_ok(kiln_context_options_set_enable_cuda(options, 1));
  kiln_context_options_release(options);
}

static void test_options_reject_bad_values(void **state) {
  (void)state;
  kiln_context_options *options = NULL;
  assert_kiln_ok(kiln_context_options_create(&options));

  assert_status(kiln_context_options_set_num_threads(options, -1), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("-1");
  assert_status(kiln_context_options_set_num_threads(options, 1025), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("1025");
  assert_status(kiln_context_options_set_num_threads(options, INT64_MIN), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_context_options_set_log_level(options, (kiln_log_level)-1), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_context_options_set_log_level(options, (kiln_log_level)5), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("5");

  /* A rejected value leaves the earlier one: 3 threads reach the CPU backend. */
  assert_kiln_ok(kiln_context_options_set_num_threads(options, 3));
  assert_status(kiln_context_options_set_num_threads(options, 5000), KILN_ERROR_INVALID_ARGUMENT);
  assert_kiln_ok(kiln_context_options_set_log_level(options, KILN_LOG_OFF));
  kiln_context *ctx = create_with(options);
  kiln_device_info info = {.struct_size = sizeof info};
  assert_kiln_ok(kiln_device_get_info(ctx, cpu, &info));
  assert_int_equal(info.threads, 3);
  kiln_context_release(ctx);
}

static void test_options_null_and_released(void **state) {
  (void)state;
  assert_status(kiln_context_options_create(NULL), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("out");
  assert_status(kiln_context_options_set_seed(NULL, 1), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_context_options_set_num_threads(NULL, 1), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_context_options_set_log_level(NULL, KILN_LOG_INFO), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_context_options_set_log_callback(NULL, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_context_options_set_enable_cuda(NULL, 1), KILN_ERROR_INVALID_ARGUMENT);
  kiln_context_options_release(NULL);

  kiln_context_options *options = NULL;
  assert_kiln_ok(kiln_context_options_create(&options));
  kiln_context_options_release(options);
  kiln_context_options_release(options); /* unknown pointer: a no-op */
  assert_status(kiln_context_options_set_seed(options, 1), KILN_ERROR_INVALID_HANDLE);
  assert_last_error_contains("context options");
  assert_status(kiln_context_options_set_num_threads(options, 1), KILN_ERROR_INVALID_HANDLE);
  assert_status(kiln_context_options_set_log_level(options, KILN_LOG_INFO), KILN_ERROR_INVALID_HANDLE);
  assert_status(kiln_context_options_set_log_callback(options, NULL, NULL), KILN_ERROR_INVALID_HANDLE);
  assert_status(kiln_context_options_set_enable_cuda(options, 1), KILN_ERROR_INVALID_HANDLE);

  kiln_context *ctx = (kiln_context *)&ctx; /* must be cleared on failure */
  assert_status(kiln_context_create(options, &ctx), KILN_ERROR_INVALID_HANDLE);
  assert_null(ctx);
}

/* ---- contexts ----------------------------------------------------------- */

static void test_context_create_and_release(void **state) {
  (void)state;
  kiln_context *ctx = NULL;
  assert_kiln_ok(kiln_context_create(NULL, &ctx));
  assert_non_null(ctx);
  kiln_context *other = NULL;
  assert_kiln_ok(kiln_context_create(NULL, &other));
  assert_ptr_not_equal(ctx, other);
  kiln_context_release(other);
  assert_kiln_ok(kiln_context_set_seed(ctx, 7)); /* the first is untouched */
  kiln_context_release(ctx);

  assert_status(kiln_context_create(NULL, NULL), KILN_ERROR_INVALID_ARGUMENT);
  kiln_context_release(NULL);
}

static void test_context_released_and_foreign_handles(void **state) {
  (void)state;
  kiln_context_options *options = NULL;
  assert_kiln_ok(kiln_context_options_create(&options));
  kiln_context *ctx = NULL;
  assert_kiln_ok(kiln_context_create(options, &ctx));

  /* A handle of another type is not a context, and the reverse. */
  assert_status(kiln_context_set_seed((kiln_context *)options, 1), KILN_ERROR_INVALID_HANDLE);
  assert_last_error_contains("context");
  assert_status(kiln_context_options_set_seed((kiln_context_options *)ctx, 1), KILN_ERROR_INVALID_HANDLE);
  kiln_context *from_wrong = NULL;
  assert_status(kiln_context_create((const kiln_context_options *)ctx, &from_wrong), KILN_ERROR_INVALID_HANDLE);
  assert_null(from_wrong);
  kiln_context_options_release((kiln_context_options *)ctx); /* wrong type: ignored */
  assert_kiln_ok(kiln_context_set_seed(ctx, 1));

  kiln_context_options_release(options);
  kiln_context_release(ctx);
  kiln_context_release(ctx);
  assert_status(kiln_context_set_seed(ctx, 1), KILN_ERROR_INVALID_HANDLE);
  int available = -1;
  assert_status(kiln_cuda_is_available(ctx, &available), KILN_ERROR_INVALID_HANDLE);
  assert_int_equal(available, 0);
  assert_status(kiln_context_set_seed(NULL, 1), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("ctx");
}

/* Tensors keep their context alive after the caller's handle is gone. */
static void test_context_outlives_its_handle(void **state) {
  (void)state;
  kiln_context *ctx = kiln_test_context_create(1);
  const int64_t shape[] = {3};
  kiln_tensor *t = NULL;
  assert_kiln_ok(kiln_tensor_full(ctx, shape, 1, KILN_F64, cpu, 2.5, &t));
  kiln_context_release(ctx);
  const double want[] = {2.5, 2.5, 2.5};
  assert_tensor_close(t, want, 3, 0.0, 0.0);
  kiln_tensor_release(t);
}

/* ---- seeding ------------------------------------------------------------ */

static void draw(kiln_context *ctx, double *out, int64_t n) {
  kiln_tensor *t = NULL;
  assert_kiln_ok(kiln_tensor_rand(ctx, &n, 1, KILN_F64, cpu, &t));
  kiln_test_read_f64(t, out, n);
  kiln_tensor_release(t);
}

static void test_seed_makes_draws_reproducible(void **state) {
  (void)state;
  enum { N = 16 };
  double first[N], second[N], again[N], other[N], fresh[N];
  kiln_context *ctx = kiln_test_context_create(5);
  draw(ctx, first, N);
  draw(ctx, second, N);
  assert_memory_not_equal(first, second, sizeof first); /* the stream moves on */

  assert_kiln_ok(kiln_context_set_seed(ctx, 5)); /* rewinds to the start */
  draw(ctx, again, N);
  assert_memory_equal(first, again, sizeof first);
  draw(ctx, again, N);
  assert_memory_equal(second, again, sizeof second);

  assert_kiln_ok(kiln_context_set_seed(ctx, 6));
  draw(ctx, other, N);
  assert_memory_not_equal(first, other, sizeof first);

  kiln_context *ctx2 = kiln_test_context_create(5); /* the option seeds the same way */
  draw(ctx2, fresh, N);
  assert_memory_equal(first, fresh, sizeof first);
  for (int i = 0; i < N; ++i) assert_true(first[i] >= 0.0 && first[i] < 1.0);
  kiln_context_release(ctx2);
  kiln_context_release(ctx);
}

/* ---- logging ------------------------------------------------------------ */

typedef struct log_capture {
  int calls;
  int wrong_size;
  int below_level;
  kiln_log_level min_level;
  char cuda_line[512];
} log_capture;

/* The capture the running test passed as the callback's user pointer. */
static log_capture *expected_user;
static int stray_calls;

static int capture_log(void *user, const kiln_log_record *record) {
  if (user != expected_user) {
    stray_calls++;
    return 0;
  }
  log_capture *c = (log_capture *)user;
  c->calls++;
  if (record->struct_size != sizeof(kiln_log_record)) c->wrong_size++;
  if (record->level < c->min_level) c->below_level++;
  if (strstr(record->message, "CUDA backend") && !c->cuda_line[0])
    snprintf(c->cuda_line, sizeof c->cuda_line, "%s", record->message);
  return 0;
}

static kiln_context *context_logging_to(log_capture *capture, kiln_log_level level) {
  kiln_context_options *options = NULL;
  assert_kiln_ok(kiln_context_options_create(&options));
  assert_kiln_ok(kiln_context_options_set_log_level(options, level));
  assert_kiln_ok(kiln_context_options_set_log_callback(options, capture_log, capture));
  capture->min_level = level;
  expected_user = capture;
  return create_with(options);
}

static void test_log_callback_receives_records(void **state) {
  (void)state;
  log_capture capture = {0};
  kiln_context *ctx = context_logging_to(&capture, KILN_LOG_DEBUG);
  assert_int_equal(stray_calls, 0);
  assert_true(capture.calls >= 2); /* where the plugin was looked for, and the outcome */
  assert_int_equal(capture.wrong_size, 0);
  assert_int_equal(capture.below_level, 0);
  assert_true(capture.cuda_line[0] != '\0');
  int available = 0;
  assert_kiln_ok(kiln_cuda_is_available(ctx, &available));
  if (!available) assert_non_null(strstr(capture.cuda_line, reason_of(ctx)));
  kiln_context_release(ctx);
}

static void test_log_level_filters_records(void **state) {
  (void)state;
  /* Creation logs at INFO and DEBUG only, unless the plugin is broken. */
  log_capture capture = {0};
  kiln_context *ctx = context_logging_to(&capture, KILN_LOG_INFO);
  assert_int_equal(capture.below_level, 0);
  assert_true(capture.calls >= 1);
  kiln_context_release(ctx);

  log_capture off = {0};
  ctx = context_logging_to(&off, KILN_LOG_OFF);
  assert_int_equal(off.calls, 0);
  kiln_context_release(ctx);
}

/* A callback that calls back into kiln (which the header forbids) must not
 * recurse without end: records logged while it runs are dropped. */
typedef struct reentry {
  kiln_context_options *options; /* these options, with this callback */
  int depth, max_depth, calls, inner_failures;
} reentry;

static int create_context_from_callback(void *user, const kiln_log_record *record) {
  (void)record;
  reentry *r = (reentry *)user;
  r->calls++;
  r->depth++;
  if (r->depth > r->max_depth) r->max_depth = r->depth;
  if (r->depth < 50) {
    kiln_context *inner = NULL;
    if (kiln_context_create(r->options, &inner) != KILN_OK) r->inner_failures++;
    kiln_context_release(inner);
  }
  r->depth--;
  return 0;
}

static void test_log_callback_reentry(void **state) {
  (void)state;
  reentry r = {0};
  assert_kiln_ok(kiln_context_options_create(&r.options));
  assert_kiln_ok(kiln_context_options_set_log_level(r.options, KILN_LOG_DEBUG));
  assert_kiln_ok(kiln_context_options_set_log_callback(r.options, create_context_from_callback, &r));
  kiln_context *ctx = NULL;
  assert_kiln_ok(kiln_context_create(r.options, &ctx));
  kiln_context_options_release(r.options);
  kiln_context_release(ctx);
  assert_int_equal(r.max_depth, 1);
  assert_true(r.calls >= 2);
  assert_int_equal(r.inner_failures, 0);
}

/* Without a callback, records go to stderr as "kiln: LEVEL: message". */
static void test_log_to_stderr(void **state) {
  (void)state;
  char dir[256], path[300];
  kiln_test_make_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/stderr.txt", dir);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  assert_true(fd >= 0);
  fflush(stderr);
  int saved = dup(2);
  assert_true(saved >= 0);
  dup2(fd, 2);

  kiln_context_options *options = NULL;
  kiln_context *ctx = NULL;
  kiln_status status = kiln_context_options_create(&options);
  if (status == KILN_OK) status = kiln_context_options_set_log_level(options, KILN_LOG_INFO);
  if (status == KILN_OK) status = kiln_context_create(options, &ctx);
  kiln_context_options_release(options);
  kiln_context_release(ctx);

  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  assert_kiln_ok(status);

  char text[4096] = {0};
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  kiln_test_remove_tree(dir);
  text[n] = '\0';
  assert_non_null(strstr(text, "kiln: info: CUDA backend"));
  assert_null(strstr(text, "kiln: debug:")); /* below the level */
}

/* ---- the CUDA plugin loader --------------------------------------------- */

static void test_cuda_disabled_by_options(void **state) {
  (void)state;
  kiln_context_options *options = quiet_options();
  assert_kiln_ok(kiln_context_options_set_enable_cuda(options, 0));
  kiln_context *ctx = create_with(options);
  int available = 1;
  assert_kiln_ok(kiln_cuda_is_available(ctx, &available));
  assert_int_equal(available, 0);
  assert_non_null(strstr(reason_of(ctx), "disabled"));
  kiln_device dev;
  assert_status(kiln_device_parse(ctx, "cuda:0", &dev), KILN_ERROR_DEVICE_UNAVAILABLE);
  assert_last_error_contains("disabled");
  assert_kiln_ok(kiln_device_parse(ctx, "auto", &dev));
  assert_int_equal(dev.kind, KILN_DEVICE_CPU);
  kiln_context_release(ctx);
}

/* The plugin is looked for once per process, by the first context that wants
 * CUDA, and KILN_BACKEND_PATH is read then. So every case about a particular
 * plugin directory runs in a child process of its own: run_in_child starts
 * this program again with that directory as KILN_BACKEND_PATH and the case's
 * name, and main runs just that case (one of child_cases) there.
 *
 * The registry asks the driver (libcuda.so.1) before it loads the plugin, so
 * the child finds tests/fake_libcuda.c's driver first on LD_LIBRARY_PATH: with
 * fake_devices (KILN_FAKE_CUDA_DEVICES) it reports that many devices and the
 * plugin is loaded; with NULL its cuInit says CUDA_ERROR_NO_DEVICE. */
static void run_in_child_with_driver(const char *case_name, const char *backend_path, const char *fake_devices) {
  /* This process's environment, with the variables above replaced. */
  static const char *const kReplaced[] = {"KILN_BACKEND_PATH=", "LD_LIBRARY_PATH=", "KILN_FAKE_CUDA_DEVICES="};
  size_t n = 0;
  while (environ[n]) ++n;
  char **env = calloc(n + 4, sizeof *env);
  assert_non_null(env);
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    int replaced = 0;
    for (size_t r = 0; r < sizeof kReplaced / sizeof *kReplaced; ++r)
      replaced |= strncmp(environ[i], kReplaced[r], strlen(kReplaced[r])) == 0;
    if (!replaced) env[kept++] = environ[i];
  }
  const char *library_path = getenv("LD_LIBRARY_PATH");
  char setting[600], loader[4200], devices[64];
  snprintf(setting, sizeof setting, "KILN_BACKEND_PATH=%s", backend_path);
  snprintf(loader, sizeof loader, "LD_LIBRARY_PATH=%s%s%s", KILN_FAKE_LIBCUDA_DIR,
           library_path && *library_path ? ":" : "", library_path ? library_path : "");
  env[kept++] = setting;
  env[kept++] = loader;
  if (fake_devices) {
    snprintf(devices, sizeof devices, "KILN_FAKE_CUDA_DEVICES=%s", fake_devices);
    env[kept++] = devices;
  }
  env[kept] = NULL;

  char *argv[] = {"/proc/self/exe", "--child", (char *)case_name, NULL};
  fflush(stdout);
  fflush(stderr);
  pid_t pid = 0;
  int spawned = posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, env);
  free(env);
  assert_int_equal(spawned, 0);
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    print_error("child case %s (KILN_BACKEND_PATH=%s) failed, wait status %d: its output is above\n", case_name,
                backend_path, status);
    fail();
  }
}

/* A child whose (fake) driver has a device, so the plugin is looked for. */
static void run_in_child(const char *case_name, const char *backend_path) {
  run_in_child_with_driver(case_name, backend_path, "1");
}

static const char *backend_path(void) {
  const char *dir = getenv("KILN_BACKEND_PATH");
  assert_non_null(dir);
  return dir;
}

static void assert_cuda_refused_with(kiln_context *ctx, const char *needle) {
  int available = 1;
  assert_kiln_ok(kiln_cuda_is_available(ctx, &available));
  assert_int_equal(available, 0);
  const char *reason = reason_of(ctx);
  if (!strstr(reason, needle)) {
    print_error("reason \"%s\" does not mention \"%s\"\n", reason, needle);
    fail();
  }
  kiln_device dev = {KILN_DEVICE_CUDA, 3};
  assert_status(kiln_device_parse(ctx, "cuda:0", &dev), KILN_ERROR_DEVICE_UNAVAILABLE);
  assert_int_equal(dev.kind, 0);
  assert_int_equal(dev.index, 0);
  assert_last_error_contains("cuda:0");
  assert_last_error_contains(needle);
  int64_t count = -1;
  assert_kiln_ok(kiln_device_count(ctx, KILN_DEVICE_CUDA, &count));
  assert_int_equal(count, 0);
}

/* What a context says about CUDA. */
typedef struct cuda_view {
  kiln_status status;
  int available;
  char reason[512];
} cuda_view;

static void view_cuda(kiln_context *ctx, cuda_view *view) {
  const char *reason = NULL;
  view->available = -1;
  view->status = kiln_cuda_is_available(ctx, &view->available);
  if (view->status == KILN_OK) view->status = kiln_cuda_unavailable_reason(ctx, &reason);
  snprintf(view->reason, sizeof view->reason, "%s", reason ? reason : "(none)");
}

static void assert_same_view(const cuda_view *got, const cuda_view *want) {
  assert_kiln_ok(got->status);
  assert_int_equal(got->available, want->available);
  assert_string_equal(got->reason, want->reason);
}

typedef struct viewing_thread {
  pthread_barrier_t *barrier;
  cuda_view view;
} viewing_thread;

/* Creates a context at the same moment as the other threads, reads what it
 * says about CUDA, and releases it at the same moment too. */
static void *create_view_release(void *arg) {
  viewing_thread *t = (viewing_thread *)arg;
  kiln_context_options *options = NULL;
  kiln_context *ctx = NULL;
  t->view.status = kiln_context_options_create(&options);
  if (t->view.status == KILN_OK) t->view.status = kiln_context_options_set_log_level(options, KILN_LOG_OFF);
  pthread_barrier_wait(t->barrier);
  if (t->view.status == KILN_OK) t->view.status = kiln_context_create(options, &ctx);
  kiln_context_options_release(options);
  if (t->view.status == KILN_OK) view_cuda(ctx, &t->view);
  pthread_barrier_wait(t->barrier);
  kiln_context_release(ctx);
  return NULL;
}

/* Contexts made at once on several threads all see `want` (or, when want is
 * NULL, what the first of them sees). Returns what they saw. */
static cuda_view views_from_concurrent_contexts(const cuda_view *want) {
  enum { THREADS = 4 };
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, THREADS);
  viewing_thread threads[THREADS];
  pthread_t ids[THREADS];
  for (int i = 0; i < THREADS; ++i) {
    threads[i] = (viewing_thread){.barrier = &barrier};
    assert_int_equal(pthread_create(&ids[i], NULL, create_view_release, &threads[i]), 0);
  }
  for (int i = 0; i < THREADS; ++i) pthread_join(ids[i], NULL);
  pthread_barrier_destroy(&barrier);
  if (!want) want = &threads[0].view;
  for (int i = 0; i < THREADS; ++i) assert_same_view(&threads[i].view, want);
  return threads[0].view;
}

/* Two contexts, the first released before the second is made, and then four
 * at once: all share the process's CUDA backend, so they say the same. */
static cuda_view assert_contexts_share_cuda(void) {
  cuda_view first, second;
  kiln_context *ctx = create_with(quiet_options());
  view_cuda(ctx, &first);
  kiln_context_release(ctx);
  assert_kiln_ok(first.status);
  ctx = create_with(quiet_options());
  view_cuda(ctx, &second);
  kiln_context_release(ctx);
  assert_same_view(&second, &first);
  views_from_concurrent_contexts(&first);
  return first;
}

/* Whether the plugin in dir is mapped into this process, asked without
 * loading it. */
static int plugin_is_loaded(const char *dir) {
  char path[600];
  snprintf(path, sizeof path, "%s/libkiln_cuda.so", dir);
  void *handle = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (handle) dlclose(handle); /* drops only the reference this call took */
  return handle != NULL;
}

/* Whether any file named libkiln_cuda.so is mapped into this process, as
 * the kernel lists the mappings (/proc/self/maps). */
static int any_cuda_plugin_mapped(void) {
  FILE *maps = fopen("/proc/self/maps", "r");
  assert_non_null(maps);
  char line[4096];
  int found = 0;
  while (fgets(line, sizeof line, maps))
    if (strstr(line, "/libkiln_cuda.so")) found = 1;
  fclose(maps);
  return found;
}

static void test_contexts_share_cuda(void **state) {
  (void)state;
  /* Whatever this machine has: the build's plugin, a GPU, or neither. */
  assert_contexts_share_cuda();
}

/* ---- cases run in a child process (child_cases) -------------------------- */

static void child_missing_plugin(void **state) {
  (void)state;
  kiln_context *ctx = create_with(quiet_options());
  assert_cuda_refused_with(ctx, backend_path());
  assert_cuda_refused_with(ctx, "libkiln_cuda.so");
  kiln_context_release(ctx);
}

static void child_not_a_library(void **state) {
  (void)state;
  char path[600];
  snprintf(path, sizeof path, "%s/libkiln_cuda.so", backend_path());
  kiln_context *ctx = create_with(quiet_options());
  assert_cuda_refused_with(ctx, path); /* the loader's own message names the file */
  kiln_context_release(ctx);
}

static void child_other_build(void **state) {
  (void)state;
  for (int i = 0; i < 2; ++i) { /* the refusal is kept for later contexts */
    log_capture capture = {0};
    kiln_context_options *options = NULL;
    assert_kiln_ok(kiln_context_options_create(&options));
    assert_kiln_ok(kiln_context_options_set_log_level(options, KILN_LOG_WARNING));
    assert_kiln_ok(kiln_context_options_set_log_callback(options, capture_log, &capture));
    capture.min_level = KILN_LOG_WARNING;
    expected_user = &capture;
    kiln_context *ctx = create_with(options);
    assert_cuda_refused_with(ctx, "is from another build of kiln");
    assert_cuda_refused_with(ctx, "its build ID is " KILN_OTHER_BUILD_ID ",");
    assert_cuda_refused_with(ctx, "this libkiln's is " KILN_BUILD_ID ";");
    /* A broken installation is worth a warning even at the default level. */
    assert_int_equal(capture.calls, 1);
    kiln_context_release(ctx);
  }
}

/* A plugin without a build ID (an older kiln's) is refused as such. */
static void child_plugin_without_build_id(void **state) {
  (void)state;
  kiln_context *ctx = create_with(quiet_options());
  assert_cuda_refused_with(ctx, "is not a plugin of this kiln: it lacks kiln_plugin_build_id");
  assert_cuda_refused_with(ctx, backend_path());
  kiln_context_release(ctx);
}

static void child_fake_plugin_kept_and_shared(void **state) {
  (void)state;
  const char *dir = backend_path();
  assert_false(plugin_is_loaded(dir)); /* so the check below means something */
  kiln_context *ctx = create_with(quiet_options());
  assert_cuda_refused_with(ctx, "fake plugin: no CUDA driver on this test machine");
  kiln_context_release(ctx);
  cuda_view shared = assert_contexts_share_cuda();
  assert_non_null(strstr(shared.reason, "fake plugin"));
  /* Every context is gone, and the plugin stays. */
  assert_true(plugin_is_loaded(dir));

  /* KILN_BACKEND_PATH was read once: pointing it elsewhere changes nothing. */
  setenv("KILN_BACKEND_PATH", KILN_OTHER_BUILD_PLUGIN_DIR, 1);
  ctx = create_with(quiet_options());
  assert_cuda_refused_with(ctx, "fake plugin: no CUDA driver on this test machine");
  kiln_context_release(ctx);
  assert_false(plugin_is_loaded(KILN_OTHER_BUILD_PLUGIN_DIR));
}

/* The first contexts of the process are made on several threads at once:
 * one of them loads the plugin, and all get its answer. */
static void child_fake_plugin_first_load_on_many_threads(void **state) {
  (void)state;
  cuda_view view = views_from_concurrent_contexts(NULL);
  assert_int_equal(view.available, 0);
  assert_string_equal(view.reason, "fake plugin: no CUDA driver on this test machine");
  assert_true(plugin_is_loaded(backend_path()));
  views_from_concurrent_contexts(&view);
}

/* A driver without a device: the reason is the driver's, exactly, and the
 * plugin (which would map the CUDA runtime and cuBLAS) is never loaded. */
static void child_no_device_plugin_not_loaded(void **state) {
  (void)state;
  assert_false(any_cuda_plugin_mapped());
  kiln_context *ctx = create_with(quiet_options());
  char want[700];
  snprintf(want, sizeof want,
           "no CUDA device found: %s/libcuda.so.1 was found but cuInit failed with CUDA_ERROR_NO_DEVICE (100)",
           KILN_FAKE_LIBCUDA_DIR);
  assert_string_equal(reason_of(ctx), want);
  assert_cuda_refused_with(ctx, want);
  kiln_device dev;
  assert_kiln_ok(kiln_device_parse(ctx, "auto", &dev));
  assert_int_equal(dev.kind, KILN_DEVICE_CPU);
  kiln_context_release(ctx);
  assert_false(plugin_is_loaded(backend_path()));
  assert_false(any_cuda_plugin_mapped());
}

static const struct CMUnitTest child_cases[] = {
    cmocka_unit_test(child_no_device_plugin_not_loaded),
    cmocka_unit_test(child_missing_plugin),
    cmocka_unit_test(child_not_a_library),
    cmocka_unit_test(child_other_build),
    cmocka_unit_test(child_plugin_without_build_id),
    cmocka_unit_test(child_fake_plugin_kept_and_shared),
    cmocka_unit_test(child_fake_plugin_first_load_on_many_threads),
};

/* ---- the same cases, each in its own process ----------------------------- */

static void test_backend_path_empty_dir(void **state) {
  (void)state;
  char dir[256];
  kiln_test_make_temp_dir(dir, sizeof dir);
  run_in_child("child_missing_plugin", dir);
  kiln_test_remove_tree(dir);
}

static void test_backend_path_not_a_library(void **state) {
  (void)state;
  char dir[256], path[300];
  kiln_test_make_temp_dir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/libkiln_cuda.so", dir);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs("not an ELF file\n", f);
  fclose(f);
  run_in_child("child_not_a_library", dir);
  kiln_test_remove_tree(dir);
}

/* A plugin of another build (another build ID) is refused, and the message
 * names both IDs. */
static void test_plugin_of_another_build(void **state) {
  (void)state;
  assert_string_not_equal(KILN_BUILD_ID, KILN_OTHER_BUILD_ID);
  run_in_child("child_other_build", KILN_OTHER_BUILD_PLUGIN_DIR);
}

static void test_plugin_without_build_id(void **state) {
  (void)state;
  run_in_child("child_plugin_without_build_id", KILN_NO_BUILD_ID_PLUGIN_DIR);
}

static void test_plugin_reason_is_kept_and_plugin_stays_loaded(void **state) {
  (void)state;
  run_in_child("child_fake_plugin_kept_and_shared", KILN_FAKE_PLUGIN_DIR);
}

static void test_plugin_first_load_on_many_threads(void **state) {
  (void)state;
  run_in_child("child_fake_plugin_first_load_on_many_threads", KILN_FAKE_PLUGIN_DIR);
}

/* The fake plugin stands where the real one would: a driver without a
 * device must not make the registry load it. */
static void test_no_device_plugin_not_loaded(void **state) {
  (void)state;
  run_in_child_with_driver("child_no_device_plugin_not_loaded", KILN_FAKE_PLUGIN_DIR, NULL);
}

/* ---- threads ------------------------------------------------------------ */

typedef struct thread_case {
  const char *text; /* a bad device string, unique per thread */
  pthread_barrier_t *barrier;
  kiln_status status;
  char seen[256];
} thread_case;

static void *fail_then_read_error(void *arg) {
  thread_case *c = (thread_case *)arg;
  kiln_device dev;
  c->status = kiln_device_parse(NULL, c->text, &dev);
  /* Both threads have failed before either reads its message. */
  pthread_barrier_wait(c->barrier);
  snprintf(c->seen, sizeof c->seen, "%s", kiln_last_error());
  return NULL;
}

static void test_last_error_is_per_thread(void **state) {
  (void)state;
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, 2);
  thread_case a = {"gpu-from-thread-a", &barrier, KILN_OK, ""};
  thread_case b = {"tpu-from-thread-b", &barrier, KILN_OK, ""};
  pthread_t ta, tb;
  assert_int_equal(pthread_create(&ta, NULL, fail_then_read_error, &a), 0);
  assert_int_equal(pthread_create(&tb, NULL, fail_then_read_error, &b), 0);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  pthread_barrier_destroy(&barrier);

  assert_int_equal(a.status, KILN_ERROR_INVALID_ARGUMENT);
  assert_int_equal(b.status, KILN_ERROR_INVALID_ARGUMENT);
  assert_non_null(strstr(a.seen, "gpu-from-thread-a"));
  assert_null(strstr(a.seen, "tpu-from-thread-b"));
  assert_non_null(strstr(b.seen, "tpu-from-thread-b"));
  assert_null(strstr(b.seen, "gpu-from-thread-a"));
  /* This thread made no failing call since its last one: neither message. */
  assert_null(strstr(kiln_last_error(), "from-thread"));
}

typedef struct shared_use {
  kiln_context *ctx;
  int failures;
} shared_use;

static void *use_shared_context(void *arg) {
  shared_use *u = (shared_use *)arg;
  for (int i = 0; i < 2000; ++i) {
    kiln_device dev;
    int64_t count = 0;
    if (kiln_device_parse(u->ctx, "cpu", &dev) != KILN_OK || dev.kind != KILN_DEVICE_CPU) u->failures++;
    if (kiln_device_count(u->ctx, KILN_DEVICE_CPU, &count) != KILN_OK || count != 1) u->failures++;
  }
  return NULL;
}

static void test_context_shared_by_threads(void **state) {
  (void)state;
  enum { THREADS = 4 };
  kiln_context *ctx = kiln_test_context_create(0);
  shared_use uses[THREADS];
  pthread_t threads[THREADS];
  for (int i = 0; i < THREADS; ++i) {
    uses[i].ctx = ctx;
    uses[i].failures = 0;
    assert_int_equal(pthread_create(&threads[i], NULL, use_shared_context, &uses[i]), 0);
  }
  for (int i = 0; i < THREADS; ++i) pthread_join(threads[i], NULL);
  for (int i = 0; i < THREADS; ++i) assert_int_equal(uses[i].failures, 0);
  kiln_context_release(ctx);
}

/* Each draw reserves its own range of the stream, whichever thread makes it:
 * concurrent draws give exactly the chunks sequential draws give, in some
 * order. */
enum { DRAWS = 4, DRAW_SIZE = 256 };

typedef struct concurrent_draw {
  kiln_context *ctx;
  pthread_barrier_t *barrier;
  kiln_tensor *tensor;
  kiln_status status;
} concurrent_draw;

static void *draw_after_barrier(void *arg) {
  concurrent_draw *d = (concurrent_draw *)arg;
  const int64_t n = DRAW_SIZE;
  pthread_barrier_wait(d->barrier);
  d->status = kiln_tensor_rand(d->ctx, &n, 1, KILN_F64, cpu, &d->tensor);
  return NULL;
}

static void test_concurrent_draws_take_disjoint_ranges(void **state) {
  (void)state;
  static double sequential[DRAWS][DRAW_SIZE], concurrent[DRAWS][DRAW_SIZE];
  kiln_context *ctx = kiln_test_context_create(11);
  for (int i = 0; i < DRAWS; ++i) draw(ctx, sequential[i], DRAW_SIZE);

  assert_kiln_ok(kiln_context_set_seed(ctx, 11));
  pthread_barrier_t barrier;
  pthread_barrier_init(&barrier, NULL, DRAWS);
  concurrent_draw draws[DRAWS];
  pthread_t threads[DRAWS];
  for (int i = 0; i < DRAWS; ++i) {
    draws[i] = (concurrent_draw){ctx, &barrier, NULL, KILN_ERROR_INTERNAL};
    assert_int_equal(pthread_create(&threads[i], NULL, draw_after_barrier, &draws[i]), 0);
  }
  for (int i = 0; i < DRAWS; ++i) pthread_join(threads[i], NULL);
  pthread_barrier_destroy(&barrier);
  for (int i = 0; i < DRAWS; ++i) {
    assert_kiln_ok(draws[i].status);
    kiln_test_read_f64(draws[i].tensor, concurrent[i], DRAW_SIZE);
    kiln_tensor_release(draws[i].tensor);
  }
  kiln_context_release(ctx);

  int matched[DRAWS] = {0};
  for (int i = 0; i < DRAWS; ++i) {
    int found = -1;
    for (int j = 0; j < DRAWS && found < 0; ++j)
      if (!matched[j] && memcmp(concurrent[i], sequential[j], sizeof sequential[j]) == 0) found = j;
    if (found < 0) {
      print_error("concurrent draw %d matches no sequential draw: ranges overlapped or were skipped\n", i);
      fail();
    }
    matched[found] = 1;
  }
}

/* A context made on one thread is released on another. */
static void *release_context(void *arg) {
  kiln_context_release((kiln_context *)arg);
  return NULL;
}

static void test_context_released_on_another_thread(void **state) {
  (void)state;
  kiln_context *ctx = kiln_test_context_create(0);
  pthread_t releaser;
  assert_int_equal(pthread_create(&releaser, NULL, release_context, ctx), 0);
  pthread_join(releaser, NULL);
  assert_status(kiln_context_set_seed(ctx, 1), KILN_ERROR_INVALID_HANDLE);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--child") == 0) { /* from run_in_child */
    for (size_t i = 0; i < sizeof child_cases / sizeof child_cases[0]; ++i) {
      if (strcmp(child_cases[i].name, argv[2]) != 0) continue;
      const struct CMUnitTest one[] = {child_cases[i]};
      return cmocka_run_group_tests_name(argv[2], one, NULL, NULL);
    }
    fprintf(stderr, "no child case %s\n", argv[2]);
    return 2;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_options_defaults_and_setters),
      cmocka_unit_test(test_options_reject_bad_values),
      cmocka_unit_test(test_options_null_and_released),
      cmocka_unit_test(test_context_create_and_release),
      cmocka_unit_test(test_context_released_and_foreign_handles),
      cmocka_unit_test(test_context_outlives_its_handle),
      cmocka_unit_test(test_seed_makes_draws_reproducible),
      cmocka_unit_test(test_log_callback_receives_records),
      cmocka_unit_test(test_log_level_filters_records),
      cmocka_unit_test(test_log_callback_reentry),
      cmocka_unit_test(test_log_to_stderr),
      cmocka_unit_test(test_cuda_disabled_by_options),
      cmocka_unit_test(test_backend_path_empty_dir),
      cmocka_unit_test(test_backend_path_not_a_library),
      cmocka_unit_test(test_plugin_of_another_build),
      cmocka_unit_test(test_plugin_without_build_id),
      cmocka_unit_test(test_plugin_reason_is_kept_and_plugin_stays_loaded),
      cmocka_unit_test(test_plugin_first_load_on_many_threads),
      cmocka_unit_test(test_no_device_plugin_not_loaded),
      cmocka_unit_test(test_contexts_share_cuda),
      cmocka_unit_test(test_last_error_is_per_thread),
      cmocka_unit_test(test_context_shared_by_threads),
      cmocka_unit_test(test_concurrent_draws_take_disjoint_ranges),
      cmocka_unit_test(test_context_released_on_another_thread),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
