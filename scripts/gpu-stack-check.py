#!/usr/bin/env python3
"""Does this machine's GPU stack work without kiln?

On the H200 of 2026-11-26 every kiln test that used cuDNN or NCCL died of a
call through a NULL pointer, with no device error. This tells the machine's
share from kiln's: PyTorch's own cuDNN (a convolution) and NCCL (an
all-reduce over one GPU), and the NVML functions NCCL looks up by name and
calls unchecked. Each check runs in a child process, so a crash is reported
as that check's signal rather than ending the others.

    python3 scripts/gpu-stack-check.py

One line a check. Exit status: 0 all passed, 1 one failed or crashed, 77 no
PyTorch with a usable GPU (nothing to compare with). scripts/gpu-check.sh's
env stage runs it.
"""
import signal
import subprocess
import sys

CHECKS = {
    "torch": """
import torch
assert torch.cuda.is_available(), "torch.cuda.is_available() is False"
print(torch.__version__, torch.cuda.get_device_name(0))
""",
    "torch cuDNN": """
import torch
x = torch.ones(2, 3, 8, 8, device="cuda")
w = torch.ones(4, 3, 3, 3, device="cuda")
torch.backends.cudnn.enabled = True
y = torch.nn.functional.conv2d(x, w)  # every output is a sum of 27 ones
assert torch.all(y == 27).item(), "conv2d of ones is not 27 everywhere"
print("cuDNN", torch.backends.cudnn.version(), "conv2d of ones: 27 everywhere")
""",
    "torch NCCL": """
import torch, torch.cuda.nccl as nccl
t = torch.full((4,), 2.0, device="cuda")
nccl.all_reduce([t])  # one GPU: the sum over one rank is the tensor itself
torch.cuda.synchronize()
assert t.tolist() == [2.0] * 4, t.tolist()
print("NCCL", nccl.version(), "all_reduce over one GPU: unchanged")
""",
    "NVML": """
import ctypes
lib = ctypes.CDLL("libnvidia-ml.so.1")
wanted = ["nvmlInit_v2", "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetPciInfo_v3",
          "nvmlDeviceGetCudaComputeCapability", "nvmlDeviceGetP2PStatus", "nvmlDeviceGetNvLinkState",
          "nvmlDeviceGetFieldValues", "nvmlErrorString", "nvmlShutdown"]
missing = [s for s in wanted if not hasattr(lib, s)]
assert not missing, "lacks " + ", ".join(missing)
assert lib.nvmlInit_v2() == 0, "nvmlInit_v2 failed"
count = ctypes.c_uint(0)
assert lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0, "nvmlDeviceGetCount_v2 failed"
lib.nvmlShutdown()
print(len(wanted), "functions found;", count.value, "device(s)")
""",
}


def run(code):
    try:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return False, "timed out after 60 s"
    out = (p.stdout.strip().splitlines() or [""])[-1]
    if p.returncode == 0:
        return True, out
    if p.returncode < 0:
        return False, "killed by " + signal.Signals(-p.returncode).name
    err = (p.stderr.strip().splitlines() or ["exit status %d" % p.returncode])[-1]
    return False, err


def main():
    ok, why = run(CHECKS["torch"])
    if not ok:
        print("torch: SKIPPED: no PyTorch with a usable GPU (%s)" % why)
        return 77
    print("torch: passed:", why)
    failed = False
    for name in ("torch cuDNN", "torch NCCL", "NVML"):
        ok, why = run(CHECKS[name])
        failed |= not ok
        print("%s: %s: %s" % (name, "passed" if ok else "FAILED", why))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
