"""The README's interop snippets, run as written.

    readme_snippets.py README.md KILN_CLI STATE_DICT_TOOL

Every ```python and ```sh block of the README's "Sharing models and tensors"
section runs, in order, in one temporary folder: the Python blocks in one
namespace (so a later block uses the model an earlier one made), the shell
blocks under bash -e with the kiln program first on the PATH. The names the
README takes as known are given: the imports (torch, nn, numpy, onnxruntime,
safetensors) and `images`, a batch of Fashion-MNIST test images flattened to
[8, 784] float32. Afterwards ONNX Runtime's `logits` must be kiln's for the
same model and images, to 1e-5, as the README says.

Needs PyTorch 2.x, onnx, onnxscript (PyTorch's exporter), ONNX Runtime,
safetensors and Fashion-MNIST (KILN_FASHION_MNIST or
/usr/share/datasets/fashion-mnist, which the README's commands read);
exits 77 (skipped), saying what is missing, otherwise.
"""
import gzip
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_reexec import reexec_or_skip  # noqa: E402

MODULES = ["numpy", "torch", "onnx", "onnxscript", "onnxruntime", "safetensors.torch"]
try:
    import numpy
    import onnxruntime
    import safetensors.torch
    import torch
    from torch import nn
    import onnx  # noqa: F401 - torch.onnx.export needs it
    import onnxscript  # noqa: F401 - and PyTorch 2.5+'s exporter this
except ImportError:
    reexec_or_skip(MODULES)

README, CLI, TOOL = (os.path.abspath(a) for a in sys.argv[1:4])
DATA = os.environ.get("KILN_FASHION_MNIST", "/usr/share/datasets/fashion-mnist")
if not torch.__version__.startswith("2."):
    print("SKIP: the README's snippets are for PyTorch 2.x, this is %s" % torch.__version__)
    sys.exit(77)
if not os.path.exists(os.path.join(DATA, "t10k-images-idx3-ubyte.gz")):
    print("SKIP: no Fashion-MNIST at %s (the README's kiln commands read it)" % DATA)
    sys.exit(77)
if DATA != "/usr/share/datasets/fashion-mnist":
    print("SKIP: the README's kiln commands read /usr/share/datasets/fashion-mnist, not %s" % DATA)
    sys.exit(77)


def section_blocks(text, title):
    """The (language, code) of each fenced block of section `title`."""
    start = text.index("\n## %s\n" % title)
    end = text.find("\n## ", start + 1)
    body = text[start:end if end >= 0 else len(text)]
    return re.findall(r"```(\w*)\n(.*?)```", body, re.S)


def test_images():
    with gzip.open(os.path.join(DATA, "t10k-images-idx3-ubyte.gz")) as f:
        raw = f.read()
    return (numpy.frombuffer(raw, dtype=numpy.uint8, offset=16)[:8 * 784].reshape(8, 784) / 255.0).astype(
        numpy.float32)


def main():
    with open(README) as f:
        blocks = [(lang, code) for lang, code in section_blocks(f.read(), "Sharing models and tensors")
                  if lang in ("python", "sh")]
    if not any(lang == "python" for lang, _ in blocks) or not any(lang == "sh" for lang, _ in blocks):
        sys.exit("FAIL: found %d blocks in the README's section, expected Python and shell ones" % len(blocks))
    work = tempfile.mkdtemp(prefix="kiln_readme_")
    bin_dir = os.path.join(work, "bin")
    os.mkdir(bin_dir)
    os.symlink(CLI, os.path.join(bin_dir, "kiln"))
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ["PATH"])
    namespace = {"torch": torch, "nn": nn, "numpy": numpy, "onnxruntime": onnxruntime, "safetensors": safetensors,
                 "images": test_images()}
    os.chdir(work)
    torch.manual_seed(0)
    for i, (lang, code) in enumerate(blocks, 1):
        print("---- block %d (%s)\n%s" % (i, lang, code.rstrip()))
        sys.stdout.flush()
        if lang == "python":
            exec(compile(code, "README block %d" % i, "exec"), namespace)
        else:
            r = subprocess.run(["bash", "-e", "-c", code], env=env, capture_output=True, text=True)
            print(r.stdout + r.stderr, end="")
            if r.returncode != 0:
                sys.exit("FAIL: README block %d exited %d" % (i, r.returncode))
    # "kiln's logits, to 1e-5": ONNX Runtime's against kiln's own.
    x = namespace["images"].astype("<f8")
    x.tofile("x.bin")
    r = subprocess.run([TOOL, "logits", "mlp.safetensors", "-", str(len(x)), "x.bin", "y.bin"], capture_output=True,
                       text=True)
    if r.returncode != 0:
        sys.exit("FAIL: kiln's logits: " + r.stderr)
    kiln_logits = numpy.fromfile("y.bin", dtype="<f8").reshape(len(x), -1)
    diff = float(numpy.max(numpy.abs(kiln_logits - namespace["logits"])))
    if not numpy.allclose(namespace["logits"], kiln_logits, rtol=1e-5, atol=1e-5):
        sys.exit("FAIL: ONNX Runtime's logits differ from kiln's by up to %g" % diff)
    print("ok: %d README blocks ran; ONNX Runtime's logits = kiln's (max difference %.1e)" % (len(blocks), diff))
    os.chdir("/")
    shutil.rmtree(work)


main()
