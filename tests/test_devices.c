/* Device parsing and formatting, counts, the default device, device info and
 * synchronisation, on the CPU and, when one is usable, a GPU. */
#define _XOPEN_SOURCE 700

#include "support.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const kiln_device cpu = {KILN_DEVICE_CPU, -1};

static kiln_context *context_with_threads(int64_t threads) {
  kiln_context_options *options = NULL;
  kiln_context *ctx = NULL;
  assert_kiln_ok(kiln_context_options_create(&options));
  assert_kiln_ok(kiln_context_options_set_log_level(options, KILN_LOG_OFF));
  assert_kiln_ok(kiln_context_options_set_num_threads(options, threads));
  kiln_status status = kiln_context_create(options, &ctx);
  kiln_context_options_release(options);
  assert_kiln_ok(status);
  return ctx;
}

static int64_t cuda_count(kiln_context *ctx) {
  int64_t n = -1;
  assert_kiln_ok(kiln_device_count(ctx, KILN_DEVICE_CUDA, &n));
  return n;
}

/* ---- parsing -------------------------------------------------------------- */

static void assert_parses(kiln_context *ctx, const char *text, kiln_device_kind kind, int64_t index) {
  kiln_device dev = {KILN_DEVICE_CUDA, 99};
  assert_kiln_ok(kiln_device_parse(ctx, text, &dev));
  if (dev.kind != kind || dev.index != index) {
    print_error("\"%s\" parsed as {%d, %lld}, expected {%d, %lld}\n", text, (int)dev.kind, (long long)dev.index,
                (int)kind, (long long)index);
    fail();
  }
}

static void test_parse_valid_syntax(void **state) {
  (void)state;
  assert_parses(NULL, "cpu", KILN_DEVICE_CPU, -1);
  assert_parses(NULL, "cpu:0", KILN_DEVICE_CPU, -1);
  assert_parses(NULL, "cuda", KILN_DEVICE_CUDA, 0);
  assert_parses(NULL, "cuda:0", KILN_DEVICE_CUDA, 0);
  assert_parses(NULL, "cuda:3", KILN_DEVICE_CUDA, 3);
  assert_parses(NULL, "cuda:2147483647", KILN_DEVICE_CUDA, 2147483647);
}

static void test_parse_rejects_malformed_text(void **state) {
  kiln_context *ctx = *state;
  static const char *const bad[] = {
      "", "gpu", "GPU", "CPU", "Cuda:0", "cuda:", "cuda:-1", "cuda:+1", "cuda:abc", "cuda:1x", "cuda:0 ",
      " cpu", "cpu ", "cpu:1", "cpu:-1", "cpu:", "cuda:99999999999999999999", "cuda:2147483648", "cuda::0",
      "cuda0", "cudaa", "auto ", "cuda:1.5", "cuda:0x1", "cuda:01", "cuda:00", "cpu:00",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    /* Malformed is malformed with or without a context. */
    for (int with_ctx = 0; with_ctx < 2; ++with_ctx) {
      kiln_device dev = {KILN_DEVICE_CUDA, 42};
      kiln_status status = kiln_device_parse(with_ctx ? ctx : NULL, bad[i], &dev);
      if (status != KILN_ERROR_INVALID_ARGUMENT) {
        print_error("\"%s\" (ctx %d) gave %s, expected KILN_ERROR_INVALID_ARGUMENT\n", bad[i], with_ctx,
                    kiln_status_name(status));
        fail();
      }
      assert_int_equal(dev.kind, 0);
      assert_int_equal(dev.index, 0);
      char quoted[64];
      snprintf(quoted, sizeof quoted, "\"%s\"", bad[i]);
      assert_last_error_contains(quoted);
    }
  }
}

/* A long string (a buffer passed by mistake) is refused, quoted in part. */
static void test_parse_long_text(void **state) {
  kiln_context *ctx = *state;
  static char text[10000];
  memset(text, '7', sizeof text - 1);
  memcpy(text, "cuda:", 5);
  kiln_device dev;
  assert_status(kiln_device_parse(ctx, text, &dev), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("invalid device \"cuda:777");
  assert_true(strlen(kiln_last_error()) < 200);
}

static void test_parse_null_arguments(void **state) {
  kiln_context *ctx = *state;
  kiln_device dev;
  assert_status(kiln_device_parse(ctx, NULL, &dev), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("text");
  assert_status(kiln_device_parse(ctx, "cpu", NULL), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("out");
  assert_status(kiln_device_parse(NULL, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT);
}

static void test_parse_auto(void **state) {
  kiln_context *ctx = *state;
  kiln_device dev;
  assert_status(kiln_device_parse(NULL, "auto", &dev), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("context");
  kiln_device expected;
  kiln_device gpu;
  int has_gpu = kiln_test_cuda_device(ctx, &gpu);
  assert_kiln_ok(kiln_default_device(ctx, &expected));
  assert_parses(ctx, "auto", expected.kind, expected.index);
  if (has_gpu) {
    assert_int_equal(expected.kind, KILN_DEVICE_CUDA);
    assert_int_equal(expected.index, 0);
  } else {
    assert_int_equal(expected.kind, KILN_DEVICE_CPU);
    assert_int_equal(expected.index, -1);
  }
}

/* With a context, a CUDA index that is not there says how many there are. */
static void test_parse_missing_cuda_device(void **state) {
  kiln_context *ctx = *state;
  int64_t n = cuda_count(ctx);
  char text[32], expected[160];
  snprintf(text, sizeof text, "cuda:%lld", (long long)(n + 6));
  kiln_device dev = {KILN_DEVICE_CUDA, 5};
  assert_status(kiln_device_parse(ctx, text, &dev), KILN_ERROR_DEVICE_UNAVAILABLE);
  assert_int_equal(dev.index, 0);
  assert_last_error_contains(text);
  if (n == 0) {
    const char *reason = NULL;
    assert_kiln_ok(kiln_cuda_unavailable_reason(ctx, &reason));
    assert_true(reason[0] != '\0');
    assert_last_error_contains(reason);
  } else if (n == 1) {
    snprintf(expected, sizeof expected, "%s requested but 1 CUDA device is visible (cuda:0)", text);
    assert_string_equal(kiln_last_error(), expected);
  } else {
    snprintf(expected, sizeof expected, "%s requested but %lld CUDA devices are visible (cuda:0..cuda:%lld)", text,
             (long long)n, (long long)(n - 1));
    assert_string_equal(kiln_last_error(), expected);
  }
  /* Without a context it is only syntax, and fine. */
  assert_parses(NULL, text, KILN_DEVICE_CUDA, n + 6);
}

/* ---- formatting ------------------------------------------------------------ */

static void test_format_round_trips(void **state) {
  (void)state;
  const kiln_device devices[] = {{KILN_DEVICE_CPU, -1}, {KILN_DEVICE_CUDA, 0}, {KILN_DEVICE_CUDA, 12}};
  const char *const texts[] = {"cpu", "cuda:0", "cuda:12"};
  for (int i = 0; i < 3; ++i) {
    char buf[32];
    assert_kiln_ok(kiln_device_format(devices[i], buf, sizeof buf));
    assert_string_equal(buf, texts[i]);
    kiln_device back;
    assert_kiln_ok(kiln_device_parse(NULL, buf, &back));
    assert_int_equal(back.kind, devices[i].kind);
    assert_int_equal(back.index, devices[i].index);
  }
  /* "cpu:0"'s form {CPU, 0} is accepted and written as "cpu". */
  char buf[8];
  assert_kiln_ok(kiln_device_format((kiln_device){KILN_DEVICE_CPU, 0}, buf, sizeof buf));
  assert_string_equal(buf, "cpu");
}

static void test_format_buffer_sizes(void **state) {
  (void)state;
  const kiln_device dev = {KILN_DEVICE_CUDA, 12};
  char buf[8];
  assert_kiln_ok(kiln_device_format(dev, buf, 8)); /* "cuda:12" + NUL exactly */
  assert_string_equal(buf, "cuda:12");
  memset(buf, 'x', sizeof buf);
  assert_status(kiln_device_format(dev, buf, 7), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("needs 8");
  assert_int_equal(buf[0], '\0');
  assert_int_equal(buf[1], 'x'); /* nothing past the first byte written */
  assert_status(kiln_device_format(dev, buf, 0), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_device_format(dev, buf, -5), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("-5");
  assert_status(kiln_device_format(dev, NULL, 8), KILN_ERROR_INVALID_ARGUMENT);
}

static void test_format_rejects_bad_devices(void **state) {
  (void)state;
  char buf[32];
  assert_status(kiln_device_format((kiln_device){KILN_DEVICE_CPU, 3}, buf, sizeof buf), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("3");
  assert_string_equal(buf, "");
  assert_status(kiln_device_format((kiln_device){KILN_DEVICE_CUDA, -1}, buf, sizeof buf),
                KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_device_format((kiln_device){(kiln_device_kind)7, 0}, buf, sizeof buf),
                KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("7");
}

/* ---- availability, counts, default ------------------------------------------ */

static void test_availability_is_consistent(void **state) {
  kiln_context *ctx = *state;
  int available = -1;
  const char *reason = NULL;
  int64_t cpus = 0;
  kiln_device def;
  assert_kiln_ok(kiln_cuda_is_available(ctx, &available));
  assert_kiln_ok(kiln_cuda_unavailable_reason(ctx, &reason));
  assert_kiln_ok(kiln_device_count(ctx, KILN_DEVICE_CPU, &cpus));
  assert_kiln_ok(kiln_default_device(ctx, &def));
  assert_int_equal(cpus, 1);
  assert_non_null(reason);
  if (available) {
    assert_true(cuda_count(ctx) >= 1);
    assert_string_equal(reason, "");
    assert_int_equal(def.kind, KILN_DEVICE_CUDA);
    assert_int_equal(def.index, 0);
  } else {
    assert_int_equal(cuda_count(ctx), 0);
    assert_true(strlen(reason) > 0);
    assert_int_equal(def.kind, KILN_DEVICE_CPU);
    assert_int_equal(def.index, -1);
  }
  /* The reason is owned by the context: the same pointer each time. */
  const char *again = NULL;
  assert_kiln_ok(kiln_cuda_unavailable_reason(ctx, &again));
  assert_ptr_equal(reason, again);
}

static void test_queries_reject_bad_arguments(void **state) {
  kiln_context *ctx = *state;
  int available = 7;
  const char *reason = "sentinel";
  int64_t count = 7;
  kiln_device dev = {KILN_DEVICE_CUDA, 7};
  assert_status(kiln_cuda_is_available(NULL, &available), KILN_ERROR_INVALID_ARGUMENT);
  assert_int_equal(available, 0);
  assert_status(kiln_cuda_is_available(ctx, NULL), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_cuda_unavailable_reason(NULL, &reason), KILN_ERROR_INVALID_ARGUMENT);
  assert_null(reason);
  assert_status(kiln_cuda_unavailable_reason(ctx, NULL), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_device_count(NULL, KILN_DEVICE_CPU, &count), KILN_ERROR_INVALID_ARGUMENT);
  assert_int_equal(count, 0);
  count = 7;
  assert_status(kiln_device_count(ctx, (kiln_device_kind)9, &count), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("9");
  assert_int_equal(count, 0);
  assert_status(kiln_device_count(ctx, KILN_DEVICE_CPU, NULL), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_default_device(NULL, &dev), KILN_ERROR_INVALID_ARGUMENT);
  assert_int_equal(dev.kind, 0);
  assert_int_equal(dev.index, 0);
  assert_status(kiln_default_device(ctx, NULL), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_device_synchronize(NULL, cpu), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_device_synchronize(ctx, (kiln_device){KILN_DEVICE_CPU, 1}), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_device_synchronize(ctx, (kiln_device){(kiln_device_kind)-1, 0}), KILN_ERROR_INVALID_ARGUMENT);
}

static void test_queries_on_released_context(void **state) {
  (void)state;
  kiln_context *ctx = kiln_test_context_create(0);
  kiln_context_release(ctx);
  int available;
  const char *reason;
  int64_t count;
  kiln_device dev;
  kiln_device_info info = {.struct_size = sizeof info};
  assert_status(kiln_cuda_is_available(ctx, &available), KILN_ERROR_INVALID_HANDLE);
  assert_status(kiln_cuda_unavailable_reason(ctx, &reason), KILN_ERROR_INVALID_HANDLE);
  assert_status(kiln_device_count(ctx, KILN_DEVICE_CPU, &count), KILN_ERROR_INVALID_HANDLE);
  assert_status(kiln_default_device(ctx, &dev), KILN_ERROR_INVALID_HANDLE);
  assert_status(kiln_device_parse(ctx, "cpu", &dev), KILN_ERROR_INVALID_HANDLE);
  assert_status(kiln_device_get_info(ctx, cpu, &info), KILN_ERROR_INVALID_HANDLE);
  assert_status(kiln_device_synchronize(ctx, cpu), KILN_ERROR_INVALID_HANDLE);
  assert_last_error_contains("context");
}

/* ---- device info ------------------------------------------------------------- */

static void test_cpu_info(void **state) {
  (void)state;
  kiln_context *ctx = context_with_threads(3);
  kiln_device_info info;
  memset(&info, 0xab, sizeof info);
  info.struct_size = sizeof info;
  assert_kiln_ok(kiln_device_get_info(ctx, cpu, &info));
  assert_int_equal(info.struct_size, sizeof info);
  assert_int_equal(info.device.kind, KILN_DEVICE_CPU);
  assert_int_equal(info.device.index, -1);
  size_t name_len = strnlen(info.name, sizeof info.name);
  assert_true(name_len > 0 && name_len < sizeof info.name);

  /* The reference: what the C library reports. */
  long conf_cpus = sysconf(_SC_NPROCESSORS_CONF);
  double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
  assert_true(info.multiprocessor_count >= 1 && info.multiprocessor_count <= conf_cpus);
  assert_true(info.total_memory > 0);
  assert_true(info.total_memory >= 0.99 * phys && info.total_memory <= 1.01 * phys);
  assert_true(info.free_memory > 0 && info.free_memory <= info.total_memory);
  assert_int_equal(info.threads, 3);
  assert_int_equal(info.compute_major, 0);
  assert_int_equal(info.compute_minor, 0);
  assert_int_equal(info.driver_version, 0);
  assert_int_equal(info.runtime_version, 0);

  /* "cpu:0"'s form asks for the same device. */
  kiln_device_info same = {.struct_size = sizeof same};
  assert_kiln_ok(kiln_device_get_info(ctx, (kiln_device){KILN_DEVICE_CPU, 0}, &same));
  assert_string_equal(same.name, info.name);
  assert_int_equal(same.device.index, -1);
  kiln_context_release(ctx);
}

static void test_cpu_info_default_threads(void **state) {
  (void)state;
  kiln_context *ctx = context_with_threads(0); /* one per core */
  kiln_device_info info = {.struct_size = sizeof info};
  assert_kiln_ok(kiln_device_get_info(ctx, cpu, &info));
  assert_int_equal(info.threads, info.multiprocessor_count);
  kiln_context_release(ctx);
}

/* An older, smaller struct is filled only up to its struct_size. */
static void test_info_respects_struct_size(void **state) {
  kiln_context *ctx = *state;
  kiln_device_info info;
  const uint32_t through_name = (uint32_t)(offsetof(kiln_device_info, name) + sizeof info.name);
  memset(&info, 0x5a, sizeof info);
  info.struct_size = through_name;
  assert_kiln_ok(kiln_device_get_info(ctx, cpu, &info));
  assert_int_equal(info.struct_size, through_name);
  assert_int_equal(info.device.kind, KILN_DEVICE_CPU);
  assert_true(strnlen(info.name, sizeof info.name) > 0);
  assert_int_equal(info.total_memory, 0x5a5a5a5a5a5a5a5aLL); /* past the end: untouched */
  assert_int_equal(info.threads, 0x5a5a5a5a5a5a5a5aLL);

  /* Just the first two fields. */
  const uint32_t minimal = (uint32_t)(offsetof(kiln_device_info, device) + sizeof info.device);
  memset(&info, 0x5a, sizeof info);
  info.struct_size = minimal;
  assert_kiln_ok(kiln_device_get_info(ctx, cpu, &info));
  assert_int_equal(info.device.kind, KILN_DEVICE_CPU);
  assert_int_equal(info.device.index, -1);
  assert_int_equal((unsigned char)info.name[0], 0x5a);

  /* Smaller than that is refused, and nothing is written. */
  memset(&info, 0x5a, sizeof info);
  info.struct_size = minimal - 1;
  assert_status(kiln_device_get_info(ctx, cpu, &info), KILN_ERROR_INVALID_ARGUMENT);
  assert_last_error_contains("struct_size");
  assert_int_equal(info.struct_size, minimal - 1);
  assert_int_equal(info.device.index, 0x5a5a5a5a5a5a5a5aLL);
  info.struct_size = 0;
  assert_status(kiln_device_get_info(ctx, cpu, &info), KILN_ERROR_INVALID_ARGUMENT);
  assert_status(kiln_device_get_info(ctx, cpu, NULL), KILN_ERROR_INVALID_ARGUMENT);
}

static void test_info_bad_devices(void **state) {
  kiln_context *ctx = *state;
  kiln_device_info info;
  memset(&info, 0x5a, sizeof info);
  info.struct_size = sizeof info;
  assert_status(kiln_device_get_info(ctx, (kiln_device){KILN_DEVICE_CPU, 2}, &info), KILN_ERROR_INVALID_ARGUMENT);
  assert_int_equal(info.total_memory, 0); /* cleared on failure */
  assert_int_equal(info.name[0], '\0');
  assert_int_equal(info.struct_size, sizeof info);
  assert_status(kiln_device_get_info(ctx, (kiln_device){(kiln_device_kind)3, 0}, &info), KILN_ERROR_INVALID_ARGUMENT);
  int64_t n = cuda_count(ctx);
  assert_status(kiln_device_get_info(ctx, (kiln_device){KILN_DEVICE_CUDA, n}, &info), KILN_ERROR_DEVICE_UNAVAILABLE);
  assert_int_equal(info.total_memory, 0);
  assert_status(kiln_device_synchronize(ctx, (kiln_device){KILN_DEVICE_CUDA, n}), KILN_ERROR_DEVICE_UNAVAILABLE);
}

static void test_synchronize_cpu(void **state) {
  kiln_context *ctx = *state;
  assert_kiln_ok(kiln_device_synchronize(ctx, cpu));
  assert_kiln_ok(kiln_device_synchronize(ctx, (kiln_device){KILN_DEVICE_CPU, 0}));
}

/* ---- a GPU, when there is one ------------------------------------------------ */

static void test_cuda_info(void **state) {
  kiln_context *ctx = *state;
  kiln_device gpu;
  if (!kiln_test_gpu_cases(ctx, &gpu)) skip();
  int64_t n = cuda_count(ctx);
  for (int64_t i = 0; i < n; ++i) {
    kiln_device dev = {KILN_DEVICE_CUDA, i};
    kiln_device_info info = {.struct_size = sizeof info};
    assert_kiln_ok(kiln_device_get_info(ctx, dev, &info));
    assert_int_equal(info.device.kind, KILN_DEVICE_CUDA);
    assert_int_equal(info.device.index, i);
    assert_true(strnlen(info.name, sizeof info.name) > 0);
    assert_true(info.total_memory > 0);
    assert_true(info.free_memory > 0 && info.free_memory <= info.total_memory);
    assert_true(info.compute_major >= 5);
    assert_true(info.compute_minor >= 0);
    assert_true(info.multiprocessor_count > 0);
    assert_true(info.driver_version >= 1000);
    assert_true(info.runtime_version >= 1000);
    assert_int_equal(info.threads, 0);
    assert_kiln_ok(kiln_device_synchronize(ctx, dev));
    char text[32];
    assert_kiln_ok(kiln_device_format(dev, text, sizeof text));
    kiln_device parsed;
    assert_kiln_ok(kiln_device_parse(ctx, text, &parsed));
    assert_int_equal(parsed.index, i);
  }
  assert_parses(ctx, "cuda", KILN_DEVICE_CUDA, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse_valid_syntax),
      cmocka_unit_test(test_parse_rejects_malformed_text),
      cmocka_unit_test(test_parse_long_text),
      cmocka_unit_test(test_parse_null_arguments),
      cmocka_unit_test(test_parse_auto),
      cmocka_unit_test(test_parse_missing_cuda_device),
      cmocka_unit_test(test_format_round_trips),
      cmocka_unit_test(test_format_buffer_sizes),
      cmocka_unit_test(test_format_rejects_bad_devices),
      cmocka_unit_test(test_availability_is_consistent),
      cmocka_unit_test(test_queries_reject_bad_arguments),
      cmocka_unit_test(test_queries_on_released_context),
      cmocka_unit_test(test_cpu_info),
      cmocka_unit_test(test_cpu_info_default_threads),
      cmocka_unit_test(test_info_respects_struct_size),
      cmocka_unit_test(test_info_bad_devices),
      cmocka_unit_test(test_synchronize_cpu),
      cmocka_unit_test(test_cuda_info),
  };
  return cmocka_run_group_tests(tests, kiln_test_context_setup, kiln_test_context_teardown);
}
