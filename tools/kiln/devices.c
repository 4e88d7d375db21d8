/* kiln devices: what torch.cuda.is_available(), device_count() and
 * get_device_name() tell, plus each device's memory and capabilities. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "common.h"

static double gib(int64_t bytes) { return (double)bytes / (1024.0 * 1024.0 * 1024.0); }

/* CUDA encodes versions as 1000 * major + 10 * minor. */
static void format_cuda_version(int64_t v, char *buf, size_t size) {
  if (v <= 0)
    snprintf(buf, size, "unknown");
  else
    snprintf(buf, size, "%lld.%lld", (long long)(v / 1000), (long long)((v % 1000) / 10));
}

static int print_device(const cli_command *cmd, kiln_context *ctx, kiln_device device) {
  kiln_device_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  char id[32];
  if (kiln_device_format(device, id, sizeof id) != KILN_OK) snprintf(id, sizeof id, "?");
  if (kiln_device_get_info(ctx, device, &info) != KILN_OK) {
    char what[64];
    snprintf(what, sizeof what, "cannot query %s", id);
    return report_error(cmd, what);
  }
  printf("%s: %s\n", id, info.name);
  if (device.kind == KILN_DEVICE_CPU) {
    printf("  cores: %lld, threads kiln uses: %lld\n", (long long)info.multiprocessor_count, (long long)info.threads);
    printf("  memory: %.1f GiB (%.1f GiB free)\n", gib(info.total_memory), gib(info.free_memory));
  } else {
    char driver[48], runtime[48];
    format_cuda_version(info.driver_version, driver, sizeof driver);
    format_cuda_version(info.runtime_version, runtime, sizeof runtime);
    printf("  memory: %.1f GiB (%.1f GiB free)\n", gib(info.total_memory), gib(info.free_memory));
    printf("  compute capability: %lld.%lld, multiprocessors: %lld\n", (long long)info.compute_major,
           (long long)info.compute_minor, (long long)info.multiprocessor_count);
    printf("  CUDA driver: %s, runtime: %s\n", driver, runtime);
  }
  return 0;
}

int cmd_devices(int argc, char **argv) {
  cli_command cmd = {
      .name = "devices",
      .synopsis = "",
      .summary = "Shows whether CUDA is usable (and why not), the default device and every device's\n"
                 "name, memory and capabilities. CUDA_VISIBLE_DEVICES is honoured.",
  };
  int rc = cli_parse(&cmd, argc, argv);
  if (rc != CLI_CONTINUE) return rc;

  kiln_context *ctx = NULL;
  if (kiln_context_create(NULL, &ctx) != KILN_OK) return report_error(&cmd, "cannot create a kiln context");

  int available = 0;
  int64_t cuda_count = 0;
  const char *reason = "";
  kiln_device def;
  char def_name[32] = "?";
  if (kiln_cuda_is_available(ctx, &available) != KILN_OK || kiln_cuda_unavailable_reason(ctx, &reason) != KILN_OK ||
      kiln_device_count(ctx, KILN_DEVICE_CUDA, &cuda_count) != KILN_OK || kiln_default_device(ctx, &def) != KILN_OK) {
    rc = report_error(&cmd, "cannot query devices");
    goto done;
  }
  if (kiln_device_format(def, def_name, sizeof def_name) != KILN_OK) snprintf(def_name, sizeof def_name, "?");
  printf("kiln %s\n", kiln_version_string());
  if (available)
    printf("CUDA available: yes\n");
  else
    printf("CUDA available: no (%s)\n", reason[0] ? reason : "no reason given");
  printf("CUDA devices: %lld\n", (long long)cuda_count);
  printf("default device: %s\n\n", def_name);

  kiln_device cpu = {KILN_DEVICE_CPU, -1};
  rc = print_device(&cmd, ctx, cpu);
  for (int64_t i = 0; rc == 0 && i < cuda_count; i++) {
    kiln_device gpu = {KILN_DEVICE_CUDA, i};
    rc = print_device(&cmd, ctx, gpu);
  }
done:
  kiln_context_release(ctx);
  return rc;
}
