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
3. PyTorch -> kiln through torch.save(model.state_dict(), path): f32 and
   f64, GELU, Flatten and Dropout, pickle protocols 2 to 5, nn.Parameters
   (keep_vars=True), a transposed (non-contiguous) weight; kiln's logits are
   PyTorch's, `kiln predict --format json --output probabilities` gives
   PyTorch's softmax, a half-precision state_dict is refused naming its
   dtype, and a torch.save file whose pickle would run a command (it does,
   under pickle.loads) is refused without running it.

Exits 77 (skipped) when no Python at hand imports torch and safetensors: it
tries this interpreter, $KILN_PYTHON, /usr/bin/python3 and the python3 on
PATH.
"""
import collections
import os
import pickle
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile

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

# ---- 3. PyTorch -> kiln through torch.save --------------------------------------
def sequential(*layers):
    return nn.Sequential(*layers).eval()


transposed = sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 4))
with torch.no_grad():
    transposed[0].weight = nn.Parameter(torch.randn(6, 10).t())  # a [10, 6] view with strides (1, 10)
assert not transposed[0].weight.is_contiguous()
torch_cases = [
    ("6-10-4", sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 4)), torch.float32, {}),
    ("6-10-4", sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 4)), torch.float64, {}),
    ("6-12-9-4:gelu", sequential(nn.Linear(6, 12), nn.GELU(), nn.Linear(12, 9), nn.GELU(), nn.Linear(9, 4)),
     torch.float32, {"pickle_protocol": 4}),
    ("6-10-4:dropout=0.2:flatten", sequential(nn.Flatten(), nn.Linear(6, 10), nn.ReLU(), nn.Dropout(0.2),
                                              nn.Linear(10, 4)), torch.float32, {"pickle_protocol": 5}),
    ("6-10-4", transposed, torch.float32, {}),
]
for spec, module, dtype, save_args in torch_cases:
    module = module.to(dtype)
    pt_path = os.path.join(work, "torch.pt")
    for keep_vars in (False, True):  # tensors, or nn.Parameters (_rebuild_parameter)
        torch.save(module.state_dict(keep_vars=keep_vars), pt_path, **save_args)
        x = torch.randn(5, 6, dtype=dtype)
        with torch.no_grad():
            want = module(x)
        check_close(kiln_logits(pt_path, spec, x), want,
                    "torch.save %s %s%s%s -> kiln --spec" % (spec, dtype, " Parameters" if keep_vars else "",
                                                            " " + str(save_args) if save_args else ""),
                    TOL if dtype == torch.float32 else 1e-10)

module = sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 4))
torch.save(module.state_dict(), pt_path)
run = subprocess.run([CLI, "predict", pt_path, "--spec", "6-10-4", "--input", idx, "--device", "cpu",
                      "--format", "json", "--output", "probabilities"], capture_output=True, text=True, env=env)
if run.returncode != 0:
    sys.exit("FAIL: kiln predict --format json: %s%s" % (run.stdout, run.stderr))
with torch.no_grad():
    want = torch.softmax(module(torch.tensor(pixels, dtype=torch.float32) / 255), dim=1)
got = torch.tensor(__import__("json").loads(run.stdout)["values"], dtype=torch.float64)
check_close(got, want, "kiln predict torch.pt --format json --output probabilities = PyTorch's softmax")

# f16 and bf16 state_dicts load into an f32 model as load_state_dict copies
# them: the same as PyTorch's f32 model with the widened weights.
for half in (torch.float16, torch.bfloat16):
    torch.save(module.to(half).state_dict(), pt_path)
    widened = sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 4))
    widened.load_state_dict(torch.load(pt_path))
    x = torch.randn(5, 6)
    with torch.no_grad():
        want = widened(x)
    check_close(kiln_logits(pt_path, "6-10-4", x), want, "torch.save %s state_dict -> kiln --spec (widened)" % half)

# A torch.save file whose data.pkl runs a command when unpickled: kiln must
# refuse it by name without running it. The payload is real: pickle.loads
# runs it (checked first, in this process).
marker = os.path.join(work, "pickle-ran")


class Payload:
    def __reduce__(self):
        return (os.system, ("touch '%s'" % marker,))


payload = pickle.dumps(collections.OrderedDict([("0.weight", Payload())]), protocol=2)
pickle.loads(payload)
if not os.path.exists(marker):
    sys.exit("FAIL: the hostile pickle does not run its command under pickle.loads")
os.remove(marker)
torch.save(sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 4)).state_dict(), pt_path)
with zipfile.ZipFile(pt_path) as z:
    records = [(i.filename, z.read(i.filename)) for i in z.infolist()]
hostile = os.path.join(work, "hostile.pt")
with zipfile.ZipFile(hostile, "w") as z:
    for name, data in records:
        z.writestr(name, payload if name.endswith("/data.pkl") else data)
run = subprocess.run([CLI, "predict", hostile, "--spec", "6-10-4", "--input", idx, "--device", "cpu"],
                     capture_output=True, text=True, env=env)
if run.returncode != 1 or "refused: its pickle calls posix.system" not in run.stderr or os.path.exists(marker):
    sys.exit("FAIL: a hostile torch.save file: exit %d, %s, command ran: %s"
             % (run.returncode, run.stderr, os.path.exists(marker)))
checks += 1
print("ok: a torch.save file whose pickle runs a command is refused, and the command does not run")

shutil.rmtree(work)
print("%d checks passed (torch %s, %s)" % (checks, torch.__version__, sys.executable))
