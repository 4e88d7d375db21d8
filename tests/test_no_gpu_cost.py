"""`kiln devices` on a machine with kiln's CUDA plugin (and so the CUDA
runtime, cuBLAS and cuDNN it would load) but no usable GPU costs almost
nothing: the registry asks the driver first and never loads the plugin.

    test_no_gpu_cost.py KILN_CLI BACKEND_DIR FAKE_LIBCUDA_DIR

BACKEND_DIR is where libkiln_cuda.so is (the build directory: the test says
whether the real plugin is there, which is what makes the bound mean
something). Two machines are played: a driver without a device (the fake
libcuda.so.1 of tests/fake_libcuda.c first on LD_LIBRARY_PATH: its cuInit
says CUDA_ERROR_NO_DEVICE), and, where this machine has no libcuda.so.1 at
all, no driver. Each must print its exact reason and stay within
MAX_RSS_MB of peak resident memory and MAX_MS of wall time (the fastest of
RUNS runs, so a loaded machine does not fail it by chance). Before the probe
came first, the same command peaked at about 220 MB and took 70-940 ms.
"""
import ctypes
import os
import subprocess
import sys
import time

MAX_RSS_MB = 40
MAX_MS = 50
RUNS = 5

cli, backend_dir, fake_dir = sys.argv[1:4]
plugin = os.path.join(backend_dir, "libkiln_cuda.so")
print("the CUDA plugin %s: %s" % (plugin, "present" if os.path.exists(plugin) else
                                 "absent (this build has no CUDA: the bounds still hold, but prove less)"))


def measure(env):
    """(fastest wall time in ms, largest peak RSS in MB, output of the last run)."""
    best_ms, peak_mb, out = None, 0, ""
    for _ in range(RUNS):
        start = time.perf_counter()
        child = subprocess.Popen([cli, "devices"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out = child.stdout.read()
        _, status, usage = os.wait4(child.pid, 0)
        ms = (time.perf_counter() - start) * 1000
        if os.waitstatus_to_exitcode(status) != 0:
            print("FAIL: kiln devices exited with status %d:\n%s" % (os.waitstatus_to_exitcode(status), out))
            sys.exit(1)
        best_ms = ms if best_ms is None else min(best_ms, ms)
        peak_mb = max(peak_mb, usage.ru_maxrss / 1024)
    return best_ms, peak_mb, out


failures = 0


def check(name, env, reason):
    global failures
    ms, mb, out = measure(env)
    ok = reason in out and mb <= MAX_RSS_MB and ms <= MAX_MS
    print("%s: %s: %.1f ms (fastest of %d), %.1f MB peak RSS; reason %s" %
          ("ok" if ok else "FAIL", name, ms, RUNS, mb, "printed" if reason in out else "MISSING"))
    if not ok:
        print("  want <= %d ms, <= %d MB and the reason %r in:\n%s" % (MAX_MS, MAX_RSS_MB, reason, out))
        failures += 1


base = {k: v for k, v in os.environ.items() if k not in ("KILN_FAKE_CUDA_DEVICES", "CUDA_VISIBLE_DEVICES")}
base["KILN_BACKEND_PATH"] = backend_dir
# The fake driver first; the rest of the search path stays (OpenBLAS may come from it).
no_device = dict(base, LD_LIBRARY_PATH=":".join(p for p in (fake_dir, base.get("LD_LIBRARY_PATH")) if p))
check("a driver without a device", no_device,
      "no CUDA device found: %s/libcuda.so.1 was found but cuInit failed with CUDA_ERROR_NO_DEVICE (100)" % fake_dir)

try:
    ctypes.CDLL("libcuda.so.1")
    print("skipped: no driver (this machine has libcuda.so.1)")
except OSError:
    check("no driver", base, "no CUDA driver: libcuda.so.1 not found (")

sys.exit(1 if failures else 0)
