"""ONNX's own backend test data through kiln's importer and predict.

    onnx_conformance.py STATE_DICT_TOOL KILN_CLI [--readme README.md] [--write-readme]

The tests the `onnx` package ships and generates:

- pytorch-converted: models PyTorch exported (opset 6) with inputs and
  expected outputs, converted with onnx.version_converter to opsets 7, 8, 13
  and 28 (kiln reads 7 to 28 and refuses 6, naming the converter);
- node tests of the ops kiln reads (onnx.backend.test.case.node: one node
  each, at the opset its case was written for; the "_expanded" variants,
  which spell an op in others, are left out). They feed weights and biases
  as graph inputs; kiln reads them from constants, so the inputs after the
  first become initializers holding the test's values.

Each goes through `kiln import` (refused: the reason kiln gives) and, when
imported, `state_dict_tool logits` on the test's inputs, flattened to
[batch, features] as kiln models take them, against the expected outputs
flattened the same way: pass when every value is within 1e-5 (relative, or
absolute below 1), else mismatch. It prints one line per test and opset.

Fails when anything mismatches, when a test of a layer kiln has (REQUIRED)
does not pass at every opset, or when README.md's table (between the
onnx-conformance markers) differs from this run's with the same onnx version
(--write-readme rewrites it). Exits 77 (skipped) when no Python at hand
imports numpy and onnx (tests/python_reexec.py).
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_reexec import reexec_or_skip  # noqa: E402

try:
    import numpy as np
    import onnx
    from onnx import numpy_helper, version_converter
    from onnx.backend.test.case import node as node_cases
except ImportError:
    reexec_or_skip(["numpy", "onnx"])

TOL = 1e-5
OPSETS = (7, 8, 13, 28)
# The ops kiln reads; their node tests run.
NODE_OPS = ("Gemm", "MatMul", "Relu", "LeakyRelu", "Elu", "Selu", "Softplus", "Gelu", "Tanh", "Sigmoid",
            "Softmax", "LogSoftmax", "Identity", "Dropout", "Flatten", "Reshape")
# pytorch-converted tests of layers kiln has: each must pass at every opset.
REQUIRED = ("test_Linear", "test_Linear_no_bias", "test_ELU", "test_SELU", "test_Softplus", "test_Softmax",
            "test_LogSoftmax", "test_ReLU", "test_Sigmoid", "test_Tanh", "test_LeakyReLU",
            "test_LeakyReLU_with_negval", "test_softmax_lastdim", "test_log_softmax_lastdim")
BEGIN, END = "<!-- onnx-conformance", "<!-- /onnx-conformance -->"


def run(args):
    return subprocess.run(args, capture_output=True, text=True)


class Runner:
    def __init__(self, tool, cli, work):
        self.tool, self.cli, self.work = tool, cli, work

    def check(self, model, inputs, outputs):
        """('pass' | 'mismatch' | 'refused', detail) for one model and data set."""
        onnx_path = os.path.join(self.work, "model.onnx")
        kiln_path = os.path.join(self.work, "model.safetensors")
        onnx.save(model, onnx_path)
        r = run([self.cli, "import", onnx_path, "--save", kiln_path])
        if r.returncode != 0:
            return "refused", reason(r.stderr, onnx_path)
        x = np.asarray(inputs[0], dtype=np.float64)
        rows = x.shape[0] if x.ndim else 1
        x = x.reshape(rows, -1)
        x_path, y_path = os.path.join(self.work, "x.bin"), os.path.join(self.work, "y.bin")
        x.astype("<f8").tofile(x_path)
        r = run([self.tool, "logits", kiln_path, "-", str(rows), x_path, y_path])
        if r.returncode != 0:
            return "mismatch", "imported, but predict failed: " + r.stderr.strip()
        want = np.asarray(outputs[0], dtype=np.float64).reshape(rows, -1)
        got = np.fromfile(y_path, dtype="<f8")
        if got.size != want.size:
            return "mismatch", "%d outputs, the test expects %d" % (got.size, want.size)
        got = got.reshape(want.shape)
        diff = float(np.max(np.abs(got - want))) if want.size else 0.0
        ok = bool(np.allclose(got, want, rtol=TOL, atol=TOL))
        return ("pass" if ok else "mismatch"), "max abs diff %.1e" % diff


def reason(stderr, onnx_path):
    """kiln's reason for a refusal, without the program's and the path's prefix."""
    text = stderr.strip().splitlines()[-1] if stderr.strip() else "(no message)"
    text = text.replace("kiln import: cannot import '%s': " % onnx_path, "")
    return text


def short(detail):
    """A refusal's reason up to its first ';' (the rest says what kiln reads instead)."""
    return detail.split("; ")[0].replace("|", "\\|")


def pytorch_converted(runner):
    base = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "pytorch-converted")
    results = []
    for name in sorted(os.listdir(base)):
        folder = os.path.join(base, name)
        model = onnx.load(os.path.join(folder, "model.onnx"))
        data = os.path.join(folder, "test_data_set_0")
        inputs = [numpy_helper.to_array(onnx.load_tensor(os.path.join(data, f)))
                  for f in sorted(os.listdir(data)) if f.startswith("input_")]
        outputs = [numpy_helper.to_array(onnx.load_tensor(os.path.join(data, f)))
                   for f in sorted(os.listdir(data)) if f.startswith("output_")]
        for opset in OPSETS:
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    converted = version_converter.convert_version(model, opset)
            except Exception as e:  # noqa: BLE001 - the converter's own refusal is a result
                results.append((name, opset, "not converted", str(e).splitlines()[0][:200]))
                continue
            results.append((name, opset) + runner.check(converted, inputs, outputs))
    return results


def with_weights_as_initializers(model, inputs):
    """The model with graph inputs 1.. turned into initializers of the test's values."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    keep = graph.input[0]
    for value, data in zip(list(graph.input)[1:], inputs[1:]):
        graph.initializer.append(numpy_helper.from_array(np.asarray(data), value.name))
    del graph.input[:]
    graph.input.append(keep)
    return model


def node_tests(runner):
    # collect_testcases gathers every case once per process (a module-level
    # registry): one call, filtered here.
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = node_cases.collect_testcases(None)
    results = []
    for case in sorted(cases, key=lambda c: c.name):
        ops = [n.op_type for n in case.model.graph.node]
        if "_expanded" in case.name or len(ops) != 1 or ops[0] not in NODE_OPS or not case.data_sets:
            continue
        inputs, outputs = case.data_sets[0]
        opset = [o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx")][0]
        model = with_weights_as_initializers(case.model, inputs)
        results.append((case.name, opset) + runner.check(model, inputs, outputs))
    return results


def markdown(title, results):
    """Rows per test, the opsets of one outcome together, in words that do
    not depend on the machine (so CTest can compare them with the README's)."""
    rows, counts = [], {"pass": 0, "refused": 0, "mismatch": 0, "not converted": 0}
    by_test = {}
    for name, opset, outcome, detail in results:
        by_test.setdefault(name, []).append((opset, outcome, detail))
        counts[outcome] += 1
    for name, runs in by_test.items():
        groups = {}
        for opset, outcome, detail in runs:
            key = (outcome, short(detail) if outcome != "pass" else "")
            groups.setdefault(key, []).append((opset, detail))
        cells = []
        for (outcome, text), members in groups.items():
            opsets = ", ".join(str(o) for o, _ in members)
            if outcome == "pass":  # the differences depend on the CPU's kernels: printed, not tabled
                cells.append("pass (opset %s)" % opsets)
            else:
                cells.append("%s (opset %s): %s" % (outcome, opsets, text))
        rows.append("| %s | %s |" % (name, "; ".join(cells)))
    summary = ", ".join("%d %s" % (n, k) for k, n in counts.items() if n)
    return ["**%s**: %s (test and opset runs)." % (title, summary), "", "<details><summary>every test</summary>", "",
            "| test | result |", "|---|---|"] + rows + ["", "</details>", ""]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("tool")
    parser.add_argument("cli")
    parser.add_argument("--readme")
    parser.add_argument("--write-readme", action="store_true")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="kiln_onnx_conformance_")
    runner = Runner(args.tool, args.cli, work)
    print("onnx %s, numpy %s" % (onnx.__version__, np.__version__))
    converted, nodes = pytorch_converted(runner), node_tests(runner)
    shutil.rmtree(work)
    failures = []
    for name, opset, outcome, detail in converted + nodes:
        print("%-48s opset %2d  %-8s %s" % (name, opset, outcome, detail))
        if outcome == "mismatch":
            failures.append("%s (opset %d) mismatches: %s" % (name, opset, detail))
    for name in REQUIRED:
        runs = [r for r in converted if r[0] == name]
        if len(runs) != len(OPSETS) or any(r[2] != "pass" for r in runs):
            failures.append("%s does not pass at every opset: %s" % (name, [(r[1], r[2], r[3]) for r in runs]))

    table = ["%s: tests/onnx_conformance.py, onnx %s -->" % (BEGIN, onnx.__version__)]
    table += markdown("pytorch-converted (opsets %s)" % ", ".join(map(str, OPSETS)), converted)
    table += markdown("node tests of the ops kiln reads", nodes)
    table.append(END)
    if args.readme:
        with open(args.readme) as f:
            text = f.read()
        start, stop = text.find(BEGIN), text.find(END)
        if start < 0 or stop < 0:
            failures.append("%s has no onnx-conformance markers" % args.readme)
        elif args.write_readme:
            with open(args.readme, "w") as f:
                f.write(text[:start] + "\n".join(table) + text[stop + len(END):])
            print("wrote the table into %s" % args.readme)
        else:
            current = text[start:stop + len(END)]
            version = re.search(r"onnx ([0-9][^ ]*) -->", current)
            if version and version.group(1) != onnx.__version__:
                print("note: %s's table is for onnx %s, this is %s: not compared" % (
                    args.readme, version.group(1), onnx.__version__))
            elif current != "\n".join(table):
                failures.append("%s's ONNX conformance table is not this run's: rerun with --write-readme" %
                                args.readme)
    for f in failures:
        print("FAIL: " + f)
    if failures:
        sys.exit(1)
    print("onnx_conformance: %d runs, every required test passes" % (len(converted) + len(nodes)))


if __name__ == "__main__":
    main()
