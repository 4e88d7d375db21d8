/* Saves survive kill -9. A writer process (this program run with --writer)
 * saves a model and an Adam checkpoint in a loop, each version v holding the
 * value v in every parameter, and reports on a pipe each save it starts and
 * each it completes. The test kills it with SIGKILL at random moments, then
 * checks that each file is absent (nothing saved yet) or a complete, loadable
 * version: the last one completed, or the one being saved (renamed, not yet
 * reported), and never a mix. It then saves both files again itself, after
 * which no temporary of the dead writers may remain, and starts the next
 * writer at the next version.
 *
 * KILN_KILLS (default 200) sets the number of kills, KILN_KILL_SPEC the
 * model (default "128-256-256-10": 0.4 MB of weights, 1.2 MB of Adam
 * checkpoint, which keeps CTest's 200 kills near half a minute on a loaded
 * 2-core machine), KILN_KILL_MAX_US the longest wait before a kill (default
 * 20 ms; about 60% of the kills land mid-save). The figures go to stdout;
 * bench/results/kill_during_save.md has a long run's with a larger model. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "support.h"

static const kiln_device kCpu = {KILN_DEVICE_CPU, -1};
/* The writer's end of the report pipe. */
enum { kReportFd = 3 };

static long env_long(const char *name, long fallback) {
  const char *text = getenv(name);
  return text && *text ? strtol(text, NULL, 10) : fallback;
}

static const char *spec_text(void) {
  const char *spec = getenv("KILN_KILL_SPEC");
  return spec && *spec ? spec : "128-256-256-10";
}

static kiln_model *make_model(kiln_context *ctx) {
  kiln_model_spec *spec = NULL;
  kiln_model *model = NULL;
  if (kiln_model_spec_create(&spec) != KILN_OK || kiln_model_spec_parse(spec, spec_text()) != KILN_OK ||
      kiln_model_create(ctx, spec, kCpu, &model) != KILN_OK)
    model = NULL;
  kiln_model_spec_release(spec);
  return model;
}

static kiln_trainer *make_adam_trainer(kiln_model *model) {
  kiln_trainer_options *options = NULL;
  kiln_trainer *trainer = NULL;
  if (kiln_trainer_options_create(&options) != KILN_OK ||
      kiln_trainer_options_set_optimizer(options, KILN_OPTIM_ADAM) != KILN_OK ||
      kiln_trainer_create(model, options, &trainer) != KILN_OK)
    trainer = NULL;
  kiln_trainer_options_release(options);
  return trainer;
}

/* Sets every parameter of model to v. */
static kiln_status fill_model(kiln_model *model, float v) {
  int64_t count = 0;
  kiln_status s = kiln_model_num_parameter_tensors(model, &count);
  for (int64_t i = 0; s == KILN_OK && i < count; ++i) {
    kiln_tensor *p = NULL;
    int64_t n = 0;
    s = kiln_model_parameter(model, i, &p);
    if (s == KILN_OK) s = kiln_tensor_numel(p, &n);
    float *values = s == KILN_OK ? malloc((size_t)n * sizeof(float)) : NULL;
    if (values) {
      for (int64_t j = 0; j < n; ++j) values[j] = v;
      s = kiln_tensor_copy_from_host(p, values, n * (int64_t)sizeof(float));
    } else if (s == KILN_OK) {
      s = KILN_ERROR_OUT_OF_MEMORY;
    }
    free(values);
    kiln_tensor_release(p);
  }
  return s;
}

/* The version a model holds: the value of all its parameters, or -1 when
 * they differ (a file mixing two saves). */
static long model_version(kiln_model *model) {
  int64_t count = 0;
  assert_kiln_ok(kiln_model_num_parameter_tensors(model, &count));
  long version = -2;
  for (int64_t i = 0; i < count; ++i) {
    kiln_tensor *p = NULL;
    int64_t n = 0;
    assert_kiln_ok(kiln_model_parameter(model, i, &p));
    assert_kiln_ok(kiln_tensor_numel(p, &n));
    float *values = malloc((size_t)n * sizeof(float));
    assert_non_null(values);
    assert_kiln_ok(kiln_tensor_copy_to_host(p, values, n * (int64_t)sizeof(float)));
    for (int64_t j = 0; j < n; ++j) {
      if (version == -2) version = (long)values[j];
      if (values[j] != (float)version) version = -1;
    }
    free(values);
    kiln_tensor_release(p);
  }
  return version;
}

/* Reports: 'r' ready, 'M'/'C' a model/checkpoint save started, 'm'/'c' it
 * completed. */
static void report(char kind, long version) {
  char line[32];
  int len = snprintf(line, sizeof line, "%c %ld\n", kind, version);
  if (write(kReportFd, line, (size_t)len) != len) _exit(3);
}

/* The writer: saves versions start, start + 1, ... until killed. */
static int run_writer(const char *dir, long start) {
  kiln_context *ctx = NULL;
  kiln_context_options *options = NULL;
  if (kiln_context_options_create(&options) != KILN_OK || kiln_context_options_set_num_threads(options, 1) != KILN_OK ||
      kiln_context_options_set_enable_cuda(options, 0) != KILN_OK || kiln_context_create(options, &ctx) != KILN_OK)
    return 2;
  kiln_context_options_release(options);
  kiln_model *model = make_model(ctx);
  kiln_trainer *trainer = model ? make_adam_trainer(model) : NULL;
  if (!trainer) return 2;
  char model_path[600], checkpoint_path[600];
  snprintf(model_path, sizeof model_path, "%s/model.safetensors", dir);
  snprintf(checkpoint_path, sizeof checkpoint_path, "%s/checkpoint.safetensors", dir);
  report('r', start);
  for (long v = start;; ++v) {
    if (fill_model(model, (float)v) != KILN_OK) return 4;
    report('M', v);
    if (kiln_model_save(model, model_path) != KILN_OK) return 4;
    report('m', v);
    report('C', v);
    if (kiln_trainer_save_checkpoint(trainer, checkpoint_path) != KILN_OK) return 5;
    report('c', v);
  }
}

static pid_t start_writer(const char *self, const char *dir, long start, int *report_fd) {
  int fds[2];
  assert_int_equal(pipe(fds), 0);
  char start_text[32];
  snprintf(start_text, sizeof start_text, "%ld", start);
  pid_t child = fork();
  assert_true(child >= 0);
  if (child == 0) { /* only async-signal-safe calls before exec: the parent has threads */
    close(fds[0]);
    if (dup2(fds[1], kReportFd) < 0) _exit(6);
    execl("/proc/self/exe", self, "--writer", dir, start_text, (char *)NULL);
    _exit(7);
  }
  close(fds[1]);
  *report_fd = fds[0];
  return child;
}

/* What the reports of one file say: the last save completed and the last
 * started (equal when none is in flight). */
typedef struct {
  long done, started;
} progress;

/* Bytes read from a writer's pipe and not yet parsed: a report cut short
 * by the read, completed by the next. */
typedef struct {
  char pending[256];
  size_t used;
} report_buffer;

/* Reads the writer's reports until EOF (it is dead) or, with wait_ready,
 * until its 'r'. The writer goes on writing after 'r', so the read that
 * brings 'r' may end inside a later report: its start stays in buf for the
 * next call, which completes it. */
static void read_reports(int fd, int wait_ready, report_buffer *buf, progress *model, progress *checkpoint) {
  char *pending = buf->pending;
  size_t used = buf->used;
  for (;;) {
    struct pollfd p = {fd, POLLIN, 0};
    int ready = poll(&p, 1, 30000);
    assert_true(ready == 1); /* a writer that says nothing for 30 s is stuck */
    ssize_t got = read(fd, pending + used, sizeof buf->pending - 1 - used);
    assert_true(got >= 0);
    if (got == 0) {
      buf->used = used;
      return;
    }
    used += (size_t)got;
    char *line;
    int saw_ready = 0;
    while ((line = memchr(pending, '\n', used))) {
      const long v = strtol(pending + 2, NULL, 10);
      switch (pending[0]) {
        case 'M': model->started = v; break;
        case 'm': model->done = v; break;
        case 'C': checkpoint->started = v; break;
        case 'c': checkpoint->done = v; break;
        case 'r': saw_ready = 1; break;
        default: fail_msg("unexpected report %c", pending[0]);
      }
      const size_t len = (size_t)(line - pending) + 1;
      memmove(pending, pending + len, used - len);
      used -= len;
    }
    if (wait_ready && saw_ready) {
      buf->used = used;
      return;
    }
  }
}

static int temporaries_in(const char *dir) {
  DIR *d = opendir(dir);
  assert_non_null(d);
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strstr(e->d_name, ".tmp.")) ++n;
  closedir(d);
  return n;
}

/* Checks one file after a kill: absent only while nothing was saved, else
 * the version last completed or the one being saved; then saves that
 * version again through model (or trainer; version 1 for an absent file),
 * as the next writer would. Returns the version now in the file. */
static long check_and_resave(kiln_context *ctx, const char *path, progress p, kiln_model *model, kiln_trainer *trainer,
                             int checkpoint) {
  const int absent = access(path, F_OK) != 0;
  if (absent) {
    assert_int_equal(p.done, 0);
    assert_kiln_ok(fill_model(model, 1));
  } else if (checkpoint) {
    assert_kiln_ok(kiln_trainer_load_checkpoint(trainer, path));
  } else {
    kiln_model *loaded = NULL;
    assert_kiln_ok(kiln_model_load(ctx, path, kCpu, &loaded));
    const long v = model_version(loaded);
    kiln_model_release(loaded);
    assert_true(v > 0);
    assert_kiln_ok(fill_model(model, (float)v));
  }
  const long v = model_version(model);
  if (!absent && v != p.done && v != p.started)
    fail_msg("%s holds version %ld, expected %ld or %ld", path, v, p.done, p.started);
  if (checkpoint)
    assert_kiln_ok(kiln_trainer_save_checkpoint(trainer, path));
  else
    assert_kiln_ok(kiln_model_save(model, path));
  return v;
}

static const char *g_self;

static void test_kill_during_save(void **state) {
  kiln_context *ctx = *state;
  const long kills = env_long("KILN_KILLS", 200), max_us = env_long("KILN_KILL_MAX_US", 20000);
  char dir[512], model_path[600], checkpoint_path[600];
  kiln_test_make_temp_dir(dir, sizeof dir);
  snprintf(model_path, sizeof model_path, "%s/model.safetensors", dir);
  snprintf(checkpoint_path, sizeof checkpoint_path, "%s/checkpoint.safetensors", dir);
  kiln_model *model = make_model(ctx);
  assert_non_null(model);
  kiln_trainer *trainer = make_adam_trainer(model);
  assert_non_null(trainer);

  unsigned seed = (unsigned)env_long("KILN_KILL_SEED", (long)time(NULL));
  srand(seed);
  progress model_p = {0, 0}, checkpoint_p = {0, 0};
  long mid_save = 0, temporaries = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long k = 0; k < kills; ++k) {
    int fd = -1;
    const long start = (model_p.done > checkpoint_p.done ? model_p.done : checkpoint_p.done) + 1;
    pid_t writer = start_writer(g_self, dir, start, &fd);
    report_buffer reports = {{0}, 0};
    read_reports(fd, 1, &reports, &model_p, &checkpoint_p);
    usleep((useconds_t)(rand() % (max_us + 1)));
    assert_int_equal(kill(writer, SIGKILL), 0);
    int status = 0;
    assert_int_equal(waitpid(writer, &status, 0), writer);
    if (!(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)) fail_msg("the writer exited by itself: %d", status);
    read_reports(fd, 0, &reports, &model_p, &checkpoint_p);
    assert_int_equal(reports.used, 0); /* a dead writer's last report is whole (pipe writes are atomic) */
    close(fd);

    const int left = temporaries_in(dir);
    temporaries += left;
    if (left) ++mid_save;
    model_p.done = model_p.started = check_and_resave(ctx, model_path, model_p, model, trainer, 0);
    checkpoint_p.done = checkpoint_p.started = check_and_resave(ctx, checkpoint_path, checkpoint_p, model, trainer, 1);
    /* Those saves removed every temporary the dead writers left. */
    assert_int_equal(temporaries_in(dir), 0);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("kill_during_save: spec %s, %ld kills (seed %u) in %.1f s; %ld landed mid-save (%ld temporaries left, "
         "all removed by the next save); last versions: model %ld, checkpoint %ld\n",
         spec_text(), kills, seed, (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9, mid_save,
         temporaries, model_p.done, checkpoint_p.done);
  /* Kills that never hit a save would test nothing. */
  assert_true(kills < 20 || mid_save * 10 >= kills);
  assert_true(model_p.done > 0 && checkpoint_p.done > 0);
  kiln_trainer_release(trainer);
  kiln_model_release(model);
  kiln_test_remove_tree(dir);
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "--writer") == 0) return run_writer(argv[2], strtol(argv[3], NULL, 10));
  g_self = argv[0];
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_kill_during_save, kiln_test_context_setup, kiln_test_context_teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
