"""kiln model files and PyTorch state_dicts, both ways, against real PyTorch.

    torch_state_dict.py STATE_DICT_TOOL KILN_CLI

1. kiln -> PyTorch: a model kiln saved (state_dict_tool save) loads with
   nn.Sequential(...).load_state_dict(safetensors.torch.load_file(path)),
   strict, and gives kiln's logits to 1e-5.
2. PyTorch -> kiln: safetensors.torch.save_file(model.state_dict(), path)
   of an nn.Sequential (f32 and f64, ReLU and GELU, with Dropout) loads in
   kiln with a spec (kiln_model_load_with_spec) and gives PyTorch's logits;
   `kiln predict FILE --spec ...` classifies as PyTorch does, and a spec that
   does not fit names the offending tensor.

Exits 77 (skipped) when no Python at hand imports torch and safetensors: it
tries this interpreter, /usr/bin/python3 and the python3 on PATH.
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_reexec import reexec_or_skip  # noqa: E402

try:
    import torch
    from torch import nn
    import safetensors.torch
except ImportError:
    reexec_or_skip(["torch", "safetensors.torch"])

TOOL, CLI = sys.argv[1], sys.argv[2]
TOL = 1e-5
work = tempfile.mkdtemp(prefix="kiln_torch_")
checks = 0


def kiln_logits(path, spec, x):
    """kiln's logits for x (a 2-D tensor), as f64."""
    rows, features = x.shape
    inp, out = os.path.join(work, "x.bin"), os.path.join(work, "y.bin")
    with open(inp, "wb") as f:
        f.write(struct.pack("<%dd" % (rows * features), *x.double().flatten().tolist()))
    subprocess.run([TOOL, "logits", path, spec, str(rows), inp, out], check=True)
    with open(out, "rb") as f:
        data = f.read()
    values = struct.unpack("<%dd" % (len(data) // 8), data)
    return torch.tensor(values, dtype=torch.float64).reshape(rows, -1)


def check_close(got, want, what, tol=TOL):
    global checks
    err = (got.double() - want.double()).abs().max().item()
    if not err <= tol:
        sys.exit("FAIL: %s: max |kiln - torch| = %g > %g" % (what, err, tol))
    checks += 1
    print("ok: %s (max difference %.3g)" % (what, err))


torch.manual_seed(0)

# ---- 1. kiln -> PyTorch ---------------------------------------------------------
path = os.path.join(work, "kiln.safetensors")
subprocess.run([TOOL, "save", "6-16-8-3", "42", path], check=True)
state = safetensors.torch.load_file(path)
if sorted(state) != ["0.bias", "0.weight", "2.bias", "2.weight", "4.bias", "4.weight"]:
    sys.exit("FAIL: kiln's names are %s" % sorted(state))
model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 3))
model.load_state_dict(state, strict=True)
model.eval()
x = torch.randn(7, 6)
with torch.no_grad():
    want = model(x)
check_close(kiln_logits(path, "-", x), want, "kiln file -> nn.Sequential.load_state_dict")
check_close(kiln_logits(path, "6-16-8-3", x), want, "kiln file loaded with --spec")

# ---- 2. PyTorch -> kiln ---------------------------------------------------------
cases = [
    ("6-10-4", nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 4)), torch.float32),
    ("6-12-9-4:gelu", nn.Sequential(nn.Linear(6, 12), nn.GELU(), nn.Linear(12, 9), nn.GELU(), nn.Linear(9, 4)),
     torch.float32),
    ("6-10-4:tanh", nn.Sequential(nn.Linear(6, 10), nn.Tanh(), nn.Linear(10, 4)), torch.float64),
]
for spec, module, dtype in cases:
    module = module.to(dtype).eval()
    torch_path = os.path.join(work, "torch.safetensors")
    safetensors.torch.save_file(module.state_dict(), torch_path)
    x = torch.randn(5, 6, dtype=dtype)
    with torch.no_grad():
        want = module(x)
    check_close(kiln_logits(torch_path, spec, x), want, "PyTorch %s %s -> kiln --spec" % (spec, dtype),
                TOL if dtype == torch.float32 else 1e-10)

# Dropout takes an index in nn.Sequential as in kiln's spec: Linear, ReLU,
# Dropout, Linear -> "0.*" and "3.*".
module = nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Dropout(0.2), nn.Linear(10, 4)).eval()
safetensors.torch.save_file(module.state_dict(), torch_path)
x = torch.randn(5, 6)
with torch.no_grad():
    want = module(x)
check_close(kiln_logits(torch_path, "6-10-4:relu:dropout=0.2", x), want, "PyTorch with Dropout -> kiln --spec")

# ---- the CLI: kiln predict --spec on a PyTorch file ---------------------------
# 3 images of 2x3 pixels in an IDX file; kiln predict scales u8 by 1/255.
module = nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 4)).eval()
safetensors.torch.save_file(module.state_dict(), torch_path)
pixels = [[(37 * i + 11 * j) % 256 for j in range(6)] for i in range(3)]
idx = os.path.join(work, "images.idx")
with open(idx, "wb") as f:
    f.write(struct.pack(">IIII", 0x803, 3, 2, 3) + bytes(sum(pixels, [])))
with torch.no_grad():
    classes = module(torch.tensor(pixels, dtype=torch.float32) / 255).argmax(1).tolist()
env = dict(os.environ)
run = subprocess.run([CLI, "predict", torch_path, "--spec", "6-10-4", "--input", idx, "--device", "cpu"],
                     capture_output=True, text=True, env=env)
if run.returncode != 0:
    sys.exit("FAIL: kiln predict --spec: %s%s" % (run.stdout, run.stderr))
got = [int(line.split()[1]) for line in run.stdout.splitlines() if line.strip() and line.split()[0].isdigit()]
if got != classes:
    sys.exit("FAIL: kiln predict --spec printed classes %s, PyTorch %s\n%s" % (got, classes, run.stdout))
checks += 1
print("ok: kiln predict --spec classifies as PyTorch")
run = subprocess.run([CLI, "predict", torch_path, "--spec", "6-11-4", "--input", idx, "--device", "cpu"],
                     capture_output=True, text=True, env=env)
if run.returncode != 1 or '"0.weight"' not in run.stderr:
    sys.exit("FAIL: a spec that does not fit: exit %d, %s" % (run.returncode, run.stderr))
checks += 1
print("ok: kiln predict --spec with a spec that does not fit names \"0.weight\"")

shutil.rmtree(work)
print("%d checks passed (torch %s, %s)" % (checks, torch.__version__, sys.executable))
