"""kiln's ONNX export and import against onnx, ONNX Runtime and PyTorch.

    onnx_check.py STATE_DICT_TOOL KILN_CLI

1. kiln -> ONNX: models kiln made (state_dict_tool save), written with
   `kiln export MODEL --onnx OUT` (and with --external-data), pass
   onnx.checker (full_check, with shape inference) and ONNX Runtime gives
   kiln's outputs to 1e-5, for batches of several sizes (the batch dimension
   is symbolic); a Dropout is ONNX's Dropout (the identity in inference)
   and a Flatten ONNX's Flatten; ELU, SELU, Softplus (with a beta and a
   threshold), Softmax and LogSoftmax, and a model without a Linear.
2. PyTorch -> kiln: torch.onnx.export of nn.Sequential MLPs (f32 and f64;
   ReLU, GELU, LeakyReLU, Tanh, Sigmoid, ELU, SELU, Softplus, Dropout; a
   Flatten at the input; Softmax and LogSoftmax at the end), by both of
   PyTorch 2's exporters (torch.export, the default, with its weights in
   X.onnx.data for the larger models; and the TorchScript one), read with
   `kiln import IN --save MODEL` give PyTorch's outputs to 1e-5; an f64 one
   goes back out through `kiln export` into ONNX Runtime; the imported
   parameters carry the names of the module's state_dict (the quickstart's
   NeuralNetwork: its linear_relu_stack's); and a model converted to
   opset 7 with onnx.version_converter reads the same.
3. The tutorial model, 784-32-10 ReLU behind nn.Flatten, trained briefly
   with PyTorch on Fashion-MNIST, exported with torch.onnx.export and
   imported: `kiln eval` prints PyTorch's test accuracy (when the dataset
   is at KILN_FASHION_MNIST or /usr/share/datasets/fashion-mnist).

Exits 77 (skipped) when no Python at hand imports numpy, onnx, onnxruntime
and torch (tests/python_reexec.py).
"""
import gzip
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_reexec import reexec_or_skip  # noqa: E402

try:
    import numpy as np
    import onnx
    import onnx.checker
    import onnxruntime as ort
    import torch
    from torch import nn
except ImportError:
    reexec_or_skip(["numpy", "onnx", "onnxruntime", "torch"])

TOOL, CLI = sys.argv[1], sys.argv[2]
TOL = 1e-5
work = tempfile.mkdtemp(prefix="kiln_onnx_")
checks = 0
print("onnx %s, onnxruntime %s, torch %s" % (onnx.__version__, ort.__version__, torch.__version__))


def run(args):
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("FAIL: %s: exit %d\n%s%s" % (" ".join(args), r.returncode, r.stdout, r.stderr))
    return r.stdout


def kiln_logits(path, x):
    """kiln's logits (evaluation mode) for the rows of x, from a kiln model file."""
    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    inp, out = os.path.join(work, "x.bin"), os.path.join(work, "y.bin")
    x.astype("<f8").tofile(inp)
    run([TOOL, "logits", path, "-", str(len(x)), inp, out])
    return np.fromfile(out, dtype="<f8").reshape(len(x), -1)


def check_close(got, want, what, tol=TOL):
    global checks
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape or not np.allclose(got, want, rtol=tol, atol=tol):
        sys.exit("FAIL: %s: max difference %g (shapes %s, %s)" % (
            what, float(np.max(np.abs(got - want))) if got.shape == want.shape else float("nan"),
            got.shape, want.shape))
    checks += 1
    print("ok: %s (max difference %.2g)" % (what, float(np.max(np.abs(got - want)))))


def ort_logits(path, x):
    """ONNX Runtime's outputs; onnx's reference evaluator's where ONNX Runtime
    has no kernel for the model's dtype (its CPU Elu, Selu, Softplus,
    LeakyRelu and Erf are float only)."""
    try:
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - ONNX Runtime's NotImplemented
        if "NOT_IMPLEMENTED" not in str(e):
            raise
        from onnx.reference import ReferenceEvaluator
        print("note: %s: ONNX Runtime has no kernel for it (%s): onnx's reference evaluator instead" % (
            os.path.basename(path), str(e).split(":")[-1].strip()))
        evaluator = ReferenceEvaluator(path)
        return evaluator.run(None, {evaluator.input_names[0]: x})[0]
    (inp,), (out,) = session.get_inputs(), session.get_outputs()
    return session.run([out.name], {inp.name: x})[0]


def check_names(model_path, module, what):
    """The parameters of kiln's model file carry the names of module.state_dict()."""
    global checks
    with open(model_path, "rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    got = sorted(name for name in header if name != "__metadata__")
    want = sorted(module.state_dict())
    if got != want:
        sys.exit("FAIL: %s: kiln's parameters are %s, PyTorch's state_dict has %s" % (what, got, want))
    checks += 1
    print("ok: %s: PyTorch's state_dict names (%s)" % (what, " ".join(want)))


def check_export(model_path, what, features, dtype=np.float32, output="logits", external=False):
    """kiln export MODEL -> onnx.checker and ONNX Runtime against kiln."""
    global checks
    onnx_path = os.path.join(work, "export.onnx")
    if os.path.exists(onnx_path + ".data"):
        os.remove(onnx_path + ".data")
    run([CLI, "export", model_path, "--onnx", onnx_path] + (["--external-data"] if external else []))
    if external != os.path.exists(onnx_path + ".data"):
        sys.exit("FAIL: %s: external data %s, but %s.data %s" % (
            what, "asked" if external else "not asked", onnx_path, "is missing" if external else "exists"))
    onnx.checker.check_model(onnx_path, full_check=True)  # by path: the checker reads the data file too
    m = onnx.load(onnx_path)
    ops = [n.op_type for n in m.graph.node]
    opset = [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")]
    (inp,), (out,) = m.graph.input, m.graph.output
    batch = inp.type.tensor_type.shape.dim[0]
    spec = what.lower()
    layers_kept = ("Dropout" in ops) == ("dropout" in spec) and ("Flatten" in ops) == ("flatten" in spec)
    if not layers_kept or opset != [13] or inp.name != "input" or out.name != output or not batch.dim_param:
        sys.exit("FAIL: %s: ops %s, opset %s, input %s, output %s, batch %s" % (
            what, ops, opset, inp.name, out.name, batch))
    checks += 1
    print("ok: %s: onnx.checker accepts it (ops %s%s)" % (what, " ".join(sorted(set(ops))),
                                                          ", weights in export.onnx.data" if external else ""))
    rng = np.random.default_rng(len(what))
    for rows in (1, 7, 64):
        x = rng.uniform(-2, 2, size=(rows, features)).astype(dtype)
        check_close(ort_logits(onnx_path, x), kiln_logits(model_path, x),
                    "%s: ONNX Runtime = kiln, batch %d" % (what, rows))


# ---- 1. kiln -> ONNX Runtime -----------------------------------------------------
for spec, features, output, external in [
    ("784-32-10", 784, "logits", False),
    ("784-32-10", 784, "logits", True),
    ("784-32-10:flatten", 784, "logits", False),
    ("6-16-8-3:gelu", 6, "logits", False),
    ("linear(5,7);leaky_relu(0.1);dropout(0.3);linear(7,6,nobias);tanh;linear(6,4);sigmoid;linear(4,3)", 5, "logits",
     False),
    ("6-16-8-3:elu=0.5:softmax", 6, "probabilities", False),
    ("linear(5,7);selu;linear(7,6);softplus(2,0.3);linear(6,4);softplus;linear(4,3);log_softmax", 5,
     "log_probabilities", True),
    ("linear(5,7);softplus(0.5);linear(7,3)", 5, "logits", False),
    ("input(5);elu(-0.5);softmax", 5, "probabilities", False),
]:
    path = os.path.join(work, "kiln.safetensors")
    run([TOOL, "save", spec, "42", path])
    check_export(path, "kiln %s -> ONNX" % spec, features, output=output, external=external)

# ---- 2. torch.onnx.export -> kiln import ---------------------------------------
torch.manual_seed(0)


# The exporters of this PyTorch: torch.export-based (dynamo=True, the default
# since 2.9, opset 18 and up) and TorchScript (dynamo=False), where it has both.
EXPORTERS = [("torch.export", {"dynamo": True, "opset_version": 18}), ("TorchScript", {"dynamo": False})]
try:
    import onnxscript  # noqa: F401 - torch.export-based export needs it
except ImportError:
    print("note: no onnxscript: only the TorchScript exporter runs")
    EXPORTERS = EXPORTERS[1:]


def torch_export(module, example, path, options):
    if os.path.exists(path + ".data"):
        os.remove(path + ".data")
    options = dict({"opset_version": 13}, **options)
    try:
        torch.onnx.export(module, example, path, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, **options)
    except TypeError:  # a PyTorch without the dynamo argument: its one exporter
        torch.onnx.export(module, example, path, input_names=["x"], output_names=["y"],
                          opset_version=options["opset_version"], dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})


cases = [
    ("ReLU f32", nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 4)), torch.float32),
    ("GELU + Dropout f32", nn.Sequential(nn.Linear(6, 12), nn.GELU(), nn.Dropout(0.2), nn.Linear(12, 9), nn.GELU(),
                                         nn.Linear(9, 4)), torch.float32),
    ("LeakyReLU, Tanh, Sigmoid f32", nn.Sequential(nn.Linear(6, 8), nn.LeakyReLU(0.05), nn.Linear(8, 8), nn.Tanh(),
                                                   nn.Linear(8, 5), nn.Sigmoid(), nn.Linear(5, 3)), torch.float32),
    ("Flatten + ReLU f64", nn.Sequential(nn.Flatten(), nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 4)), torch.float64),
    ("ELU, SELU, Softplus, Softmax f32", nn.Sequential(nn.Linear(6, 8), nn.ELU(0.7), nn.Linear(8, 8), nn.SELU(),
                                                       nn.Linear(8, 8), nn.Softplus(), nn.Linear(8, 8),
                                                       nn.Softplus(beta=2), nn.Linear(8, 3), nn.Softmax(dim=1)),
     torch.float32),
    ("Softplus(threshold) + LogSoftmax f64", nn.Sequential(nn.Linear(6, 8), nn.Softplus(beta=1.5, threshold=0.5),
                                                           nn.Linear(8, 3), nn.LogSoftmax(dim=1)), torch.float64),
    ("784-256-10, weights in torch.onnx.data", nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),
                                                             nn.Linear(256, 10)), torch.float32),
]
for (what, module, dtype), (exporter, options) in [(c, e) for c in cases for e in EXPORTERS]:
    module = module.to(dtype).eval()
    if "threshold" in what and exporter == "TorchScript":
        continue  # the TorchScript exporter leaves Softplus's threshold out
    features = module[1].in_features if isinstance(module[0], nn.Flatten) else module[0].in_features
    shape = (3, 2, features // 2) if isinstance(module[0], nn.Flatten) else (3, features)
    onnx_path, kiln_path = os.path.join(work, "torch.onnx"), os.path.join(work, "imported.safetensors")
    torch_export(module, torch.randn(*shape, dtype=dtype), onnx_path, options)
    external = os.path.exists(onnx_path + ".data")
    out = run([CLI, "import", onnx_path, "--save", kiln_path])
    x = torch.randn(9, *shape[1:], dtype=dtype)
    with torch.no_grad():
        want = module(x).double().numpy()
    check_close(kiln_logits(kiln_path, x.double().numpy()), want,
                "%s %s%s -> kiln import (%s)" % (exporter, what, " (external data)" if external else "",
                                                 out.splitlines()[0]))
    check_names(kiln_path, module, "%s %s -> kiln import" % (exporter, what))
    if "torch.onnx.data" in what and exporter == "torch.export" and not external:
        sys.exit("FAIL: the torch.export exporter wrote no torch.onnx.data for %s" % what)
    if dtype == torch.float64 and exporter == EXPORTERS[0][0]:
        output = "log_probabilities" if isinstance(module[-1], nn.LogSoftmax) else "logits"
        check_export(kiln_path, "torch %s -> kiln -> ONNX" % what, features, np.float64, output=output)

# ---- opsets 7 and 8: the TorchScript exporter writes them -------------------------
module = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Dropout(0.3), nn.Linear(8, 3), nn.LogSoftmax(dim=1)).eval()
for opset in (7, 8):
    onnx_path, kiln_path = os.path.join(work, "torch.onnx"), os.path.join(work, "old.safetensors")
    torch_export(module, torch.randn(3, 6), onnx_path, {"opset_version": opset, "dynamo": False})
    got = [o.version for o in onnx.load(onnx_path).opset_import if o.domain in ("", "ai.onnx")]
    if got != [opset]:
        sys.exit("FAIL: asked PyTorch for opset %d, got %s" % (opset, got))
    out = run([CLI, "import", onnx_path, "--save", kiln_path])
    x = torch.randn(9, 6)
    with torch.no_grad():
        want = module(x).double().numpy()
    check_close(kiln_logits(kiln_path, x.double().numpy()), want,
                "TorchScript opset %d -> kiln import (%s)" % (opset, out.splitlines()[0]))
    check_names(kiln_path, module, "TorchScript opset %d -> kiln import" % opset)

# ---- PyTorch's quickstart NeuralNetwork: its Sequential's names, prefix dropped ----
class NeuralNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.linear_relu_stack = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(),
                                               nn.Linear(16, 5))

    def forward(self, x):
        return self.linear_relu_stack(self.flatten(x))


quickstart = NeuralNetwork().eval()
for exporter, options in EXPORTERS:
    onnx_path, kiln_path = os.path.join(work, "quickstart.onnx"), os.path.join(work, "quickstart.safetensors")
    torch_export(quickstart, torch.randn(3, 3, 4), onnx_path, options)
    run([CLI, "import", onnx_path, "--save", kiln_path])
    what = "%s quickstart NeuralNetwork -> kiln import" % exporter
    check_names(kiln_path, quickstart.linear_relu_stack, what)
    x = torch.randn(7, 3, 4)
    with torch.no_grad():
        want = quickstart(x).double().numpy()
    check_close(kiln_logits(kiln_path, x.reshape(7, 12).double().numpy()), want, what)

# ---- x.view(x.size(0), -1) in forward(): the TorchScript exporter reads the batch with Shape ----
class ViewNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(12, 8), nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x.view(x.size(0), -1))))


view_net = ViewNet().eval()
for exporter, options in EXPORTERS:
    onnx_path, kiln_path = os.path.join(work, "view.onnx"), os.path.join(work, "view.safetensors")
    torch_export(view_net, torch.randn(3, 3, 4), onnx_path, options)
    run([CLI, "import", onnx_path, "--save", kiln_path])
    x = torch.randn(5, 3, 4)
    with torch.no_grad():
        want = view_net(x).double().numpy()
    check_close(kiln_logits(kiln_path, x.reshape(5, 12).double().numpy()), want,
                "%s x.view(x.size(0), -1) -> kiln import" % exporter)

# ---- 3. the tutorial model on Fashion-MNIST ------------------------------------
data = os.environ.get("KILN_FASHION_MNIST", "/usr/share/datasets/fashion-mnist")


def idx(name):
    with gzip.open(os.path.join(data, name)) as f:
        raw = f.read()
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


if not os.path.exists(os.path.join(data, "t10k-images-idx3-ubyte.gz")):
    print("note: no Fashion-MNIST at %s: the accuracy check is left out" % data)
else:
    train_x = torch.tensor(idx("train-images-idx3-ubyte.gz"), dtype=torch.float32).unsqueeze(1) / 255
    train_y = torch.tensor(idx("train-labels-idx1-ubyte.gz"), dtype=torch.int64)
    test_x = torch.tensor(idx("t10k-images-idx3-ubyte.gz"), dtype=torch.float32).unsqueeze(1) / 255
    test_y = torch.tensor(idx("t10k-labels-idx1-ubyte.gz"), dtype=torch.int64)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 32), nn.ReLU(), nn.Linear(32, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    order = torch.randperm(len(train_x))
    for start in range(0, len(train_x), 64):  # one epoch
        batch = order[start:start + 64]
        opt.zero_grad()
        nn.functional.cross_entropy(model(train_x[batch]), train_y[batch]).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        test_logits = model(test_x)
    accuracy = (test_logits.argmax(1) == test_y).double().mean().item()
    onnx_path, kiln_path = os.path.join(work, "tutorial.onnx"), os.path.join(work, "tutorial.safetensors")
    torch.onnx.export(model, test_x[:1], onnx_path, input_names=["image"], output_names=["logits"],
                      dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}})  # the default exporter
    run([CLI, "import", onnx_path, "--save", kiln_path])
    check_names(kiln_path, model, "tutorial 784-32-10 -> kiln import")
    check_close(kiln_logits(kiln_path, test_x[:256].numpy()), test_logits[:256].numpy(),
                "tutorial 784-32-10: kiln's logits = PyTorch's on 256 test images")
    out = run([CLI, "eval", kiln_path, "--data", data, "--device", "cpu"])
    line = [l for l in out.splitlines() if l.startswith("test accuracy:")]
    kiln_accuracy = float(line[0].split()[-1].rstrip("%"))
    if abs(kiln_accuracy - 100 * accuracy) > 0.006:
        sys.exit("FAIL: kiln eval prints test accuracy %.2f%%, PyTorch %.2f%%" % (kiln_accuracy, 100 * accuracy))
    checks += 1
    print("ok: tutorial 784-32-10: kiln eval's test accuracy %.2f%% = PyTorch's %.2f%%" % (
        kiln_accuracy, 100 * accuracy))

shutil.rmtree(work)
print("onnx_check: %d checks passed" % checks)
