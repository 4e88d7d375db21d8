#!/usr/bin/env python3
"""kiln inference against ONNX Runtime on the same models, in one process.

  python3 bench/ort_bench.py [--build-dir build] [--models A,B] [--batches 1,8,64,4096]
                             [--threads 1,2] [--runs 5] [--min-seconds 0.2] [--out FILE.json]

Models: A 784-32-10 and B 784-1024-1024-10 (ReLU), as kiln initialises them
(seed 1), saved by kiln and converted by `kiln export --onnx`, so ONNX Runtime
runs exactly kiln's weights (the outputs are compared). Inputs: uniform [0, 1)
floats, seeded.

Each engine is timed by a loop around its own inference call, and each call
returns a new output on both sides: kiln_model_predict (a new kiln tensor,
released right after) through ctypes, and ONNX Runtime's
InferenceSession.run_with_ort_values (a new OrtValue) with
intra_op_num_threads equal to kiln's thread count, inter_op 1, sequential
execution, all graph optimisations. Both loops run in this interpreter, so
both pay a Python call per inference (about a microsecond through ctypes, a
few through ORT's binding: that favours kiln at the smallest products, and the
table says so). Per cell the two loops alternate (kiln first in even runs,
ORT first in odd ones), each long enough for --min-seconds and each after
--settle-seconds of untimed calls of the same engine (ONNX Runtime's idle
intra-op threads spin for tens of milliseconds after its last run and would
otherwise take a core from the kiln loop that follows); a cell's time is
the median over --runs runs of the time per call, and the ratio is ORT's
median over kiln's (above 1: kiln faster). What a call through ORT's binding
costs before any arithmetic is measured too, as the time of a session whose
graph is one Identity (printed beside batches 1 and 8, in the JSON for all).

Batches 1 and 8 read every weight once per call: next to them, the time to
read the weights' bytes at the rate NumPy takes the maximum of a buffer of
that size (one thread; vectorised, bound by the reads) is printed as the
bandwidth floor. (NumPy's sum, used before, adds pairwise and ran at 30 GB/s
where the maximum reads 105 GB/s: its "floor" was 3 times kiln's time.)

Skips with a message (exit 0) where onnxruntime or NumPy is not importable.
"""
import argparse
import ctypes
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODELS = {"A": "784-32-10", "B": "784-1024-1024-10"}


def cpu_facts():
    """The CPU's model name and the vector extensions that decide kiln's kernels."""
    name, flags = platform.processor(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    wanted = ["avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_bf16"]
    return name, [f for f in wanted if f in flags], flags


def kiln_kernels(flags):
    """The inference kernels kiln picks on these flags (packed_linear.cpp)."""
    if {"avx512f", "avx512vl", "avx512bw", "avx512dq", "fma"} <= flags:
        return "avx512"
    if {"avx2", "fma"} <= flags:
        return "avx2"
    return "default (gemm + bias_act)"


class Kiln:
    """The few C API calls the benchmark needs, through ctypes."""

    def __init__(self, lib_path):
        self.lib = lib = ctypes.CDLL(lib_path)
        P, I64, I = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
        sig = {
            "kiln_context_options_create": [ctypes.POINTER(P)],
            "kiln_context_options_set_num_threads": [P, I64],
            "kiln_context_options_set_seed": [P, ctypes.c_uint64],
            "kiln_context_options_set_enable_cuda": [P, I],
            "kiln_context_create": [P, ctypes.POINTER(P)],
            "kiln_model_spec_create": [ctypes.POINTER(P)],
            "kiln_model_spec_parse": [P, ctypes.c_char_p],
            "kiln_model_create": [P, P, KilnDevice, ctypes.POINTER(P)],
            "kiln_model_set_training": [P, I],
            "kiln_model_save": [P, ctypes.c_char_p],
            "kiln_tensor_from_host": [P, P, I64, ctypes.POINTER(I64), I64, I, KilnDevice, ctypes.POINTER(P)],
            "kiln_tensor_copy_to_host": [P, P, I64],
            "kiln_model_predict": [P, P, I, ctypes.POINTER(P)],
        }
        for name, args in sig.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, I
        for name in ("kiln_context_options_release", "kiln_context_release", "kiln_model_spec_release",
                     "kiln_model_release", "kiln_tensor_release"):
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = [P], None
        lib.kiln_last_error.restype = ctypes.c_char_p
        self.cpu = KilnDevice(0, -1)

    def ok(self, status, what):
        if status != 0:
            sys.exit(f"ort_bench: {what} failed: {self.lib.kiln_last_error().decode()}")

    def context(self, threads, seed):
        opts, ctx = ctypes.c_void_p(), ctypes.c_void_p()
        self.ok(self.lib.kiln_context_options_create(ctypes.byref(opts)), "kiln_context_options_create")
        self.ok(self.lib.kiln_context_options_set_num_threads(opts, threads), "set_num_threads")
        self.ok(self.lib.kiln_context_options_set_seed(opts, seed), "set_seed")
        self.ok(self.lib.kiln_context_options_set_enable_cuda(opts, 0), "set_enable_cuda")
        self.ok(self.lib.kiln_context_create(opts, ctypes.byref(ctx)), "kiln_context_create")
        self.lib.kiln_context_options_release(opts)
        return ctx

    def model(self, ctx, spec_text):
        spec, model = ctypes.c_void_p(), ctypes.c_void_p()
        self.ok(self.lib.kiln_model_spec_create(ctypes.byref(spec)), "kiln_model_spec_create")
        self.ok(self.lib.kiln_model_spec_parse(spec, spec_text.encode()), "kiln_model_spec_parse")
        self.ok(self.lib.kiln_model_create(ctx, spec, self.cpu, ctypes.byref(model)), "kiln_model_create")
        self.lib.kiln_model_spec_release(spec)
        self.ok(self.lib.kiln_model_set_training(model, 0), "kiln_model_set_training")
        return model

    def tensor(self, ctx, array):
        shape = (ctypes.c_int64 * array.ndim)(*array.shape)
        out = ctypes.c_void_p()
        self.ok(self.lib.kiln_tensor_from_host(ctx, array.ctypes.data, array.nbytes, shape, array.ndim, 0, self.cpu,
                                               ctypes.byref(out)), "kiln_tensor_from_host")
        return out


class KilnDevice(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("index", ctypes.c_int64)]


def time_loop(fn, calls, settle_seconds=0.0):
    """Seconds per call of fn over `calls` calls, after untimed calls for
    settle_seconds: the other engine's idle threads must first stop
    spinning. ONNX Runtime's intra-op threads spin for tens of
    milliseconds after its last run, and on a 2-core machine they take a
    core from the loop that follows (measured: kiln's first 50 calls of B
    at batch 64 after 200 ORT runs took 1.5 times as long)."""
    settle_end = time.perf_counter() + settle_seconds
    while time.perf_counter() < settle_end:
        fn(1)
    start = time.perf_counter()
    fn(calls)
    return (time.perf_counter() - start) / calls


def calls_for(fn, min_seconds):
    """Calls per loop so that one loop lasts about min_seconds."""
    calls = 1
    while True:
        t = time_loop(fn, calls) * calls
        if t >= min_seconds / 4 or calls >= 1 << 22:
            return max(1, int(calls * min_seconds / max(t, 1e-9)))
        calls *= 4


def bandwidth_floor(np, nbytes, repeats=20):
    """Seconds to read nbytes at the rate NumPy takes the maximum of a
    float32 buffer that large on one thread (the best of `repeats`, the
    buffer warm)."""
    buf = np.ones(max(1, nbytes // 4), dtype=np.float32)
    buf.max()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        buf.max()
        best = min(best, time.perf_counter() - t0)
    return best


def ort_call_floor(ort, np, threads, width, min_seconds, runs):
    """Seconds per call of an ONNX Runtime session whose graph is one
    Identity of a [1, width] input: what a call through this binding costs
    before any arithmetic (None without the onnx package to write it)."""
    try:
        from onnx import TensorProto, helper
    except ImportError:
        return None
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "identity",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, width])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feeds = {"x": ort.OrtValue.ortvalue_from_numpy(np.zeros((1, width), dtype=np.float32))}
    run = sess.run_with_ort_values

    def calls(n):
        for _ in range(n):
            run(["y"], feeds)

    n = calls_for(calls, min_seconds)
    return statistics.median(time_loop(calls, n) for _ in range(runs))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    p.add_argument("--models", default="A,B")
    p.add_argument("--batches", default="1,8,64,4096")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--min-seconds", type=float, default=0.2, help="length of one timed loop")
    p.add_argument("--settle-seconds", type=float, default=0.1,
                   help="untimed calls of an engine before each of its timed loops")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    args = p.parse_args()
    try:
        import numpy as np
        import onnxruntime as ort
    except ImportError as e:
        print(f"ort_bench: skipped: {e} (pip install onnxruntime numpy, e.g. into the benchmark's venv)")
        return 0

    lib = os.path.join(args.build_dir, "libkiln.so")
    cli = os.path.join(args.build_dir, "tools", "kiln")
    for path in (lib, cli):
        if not os.path.exists(path):
            sys.exit(f"ort_bench: {path} not found; build first (cmake --build {args.build_dir})")
    kiln = Kiln(lib)
    cpu_name, extensions, flags = cpu_facts()
    batches = [int(b) for b in args.batches.split(",")]
    threads_list = [int(t) for t in args.threads.split(",")]
    print(f"CPU: {cpu_name}; extensions: {' '.join(extensions)}; kiln kernels: {kiln_kernels(flags)}; "
          f"onnxruntime {ort.__version__}", flush=True)

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for m in args.models.split(","):
            spec = MODELS[m]
            # The ONNX file from kiln's own export of the model's weights.
            ctx = kiln.context(1, 1)
            model = kiln.model(ctx, spec)
            saved, onnx_path = os.path.join(tmp, f"{m}.safetensors"), os.path.join(tmp, f"{m}.onnx")
            kiln.ok(kiln.lib.kiln_model_save(model, saved.encode()), "kiln_model_save")
            kiln.lib.kiln_model_release(model)
            kiln.lib.kiln_context_release(ctx)
            env = dict(os.environ, KILN_BACKEND_PATH=args.build_dir)
            out = subprocess.run([cli, "export", saved, "--onnx", onnx_path], capture_output=True, text=True, env=env)
            if out.returncode != 0:
                sys.exit(f"ort_bench: kiln export --onnx failed: {out.stderr.strip()}")
            sizes = [int(s) for s in spec.split("-")]
            weight_bytes = 4 * sum(sizes[i] * sizes[i + 1] + sizes[i + 1] for i in range(len(sizes) - 1))
            floor = bandwidth_floor(np, weight_bytes)

            for threads in threads_list:
                call_floor = ort_call_floor(ort, np, threads, sizes[0], args.min_seconds, args.runs)
                ctx = kiln.context(threads, 1)
                model = kiln.model(ctx, spec)  # the same weights: same seed, same draws
                so = ort.SessionOptions()
                so.intra_op_num_threads = threads
                so.inter_op_num_threads = 1
                so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
                so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
                sess = ort.InferenceSession(onnx_path, so, providers=["CPUExecutionProvider"])
                in_name, out_names = sess.get_inputs()[0].name, [o.name for o in sess.get_outputs()]
                for batch in batches:
                    x = np.random.default_rng(batch).random((batch, sizes[0]), dtype=np.float32)
                    xt = kiln.tensor(ctx, x)
                    feeds = {in_name: ort.OrtValue.ortvalue_from_numpy(x)}
                    predict, release = kiln.lib.kiln_model_predict, kiln.lib.kiln_tensor_release
                    result = ctypes.c_void_p()
                    ref = ctypes.byref(result)

                    def kiln_calls(n):
                        for _ in range(n):
                            predict(model, xt, 0, ref)
                            release(result)

                    run = sess.run_with_ort_values

                    def ort_calls(n):
                        for _ in range(n):
                            run(out_names, feeds)

                    # Same results (both compute x W^T + b in fp32, in their own order).
                    kiln.ok(predict(model, xt, 0, ref), "kiln_model_predict")
                    mine = np.empty((batch, sizes[-1]), dtype=np.float32)
                    kiln.ok(kiln.lib.kiln_tensor_copy_to_host(result, mine.ctypes.data, mine.nbytes), "copy_to_host")
                    release(result)
                    theirs = run(out_names, feeds)[0].numpy()
                    max_diff = float(np.max(np.abs(mine - theirs)))
                    if max_diff > 1e-3 * max(1.0, float(np.max(np.abs(theirs)))):
                        sys.exit(f"ort_bench: {m} batch {batch}: kiln and ONNX Runtime differ by {max_diff}")

                    n_kiln, n_ort = calls_for(kiln_calls, args.min_seconds), calls_for(ort_calls, args.min_seconds)
                    kiln_t, ort_t = [], []
                    settle = args.settle_seconds
                    for r in range(args.runs):
                        if r % 2 == 0:
                            kiln_t.append(time_loop(kiln_calls, n_kiln, settle))
                            ort_t.append(time_loop(ort_calls, n_ort, settle))
                        else:
                            ort_t.append(time_loop(ort_calls, n_ort, settle))
                            kiln_t.append(time_loop(kiln_calls, n_kiln, settle))
                    kiln.lib.kiln_tensor_release(xt)
                    row = {"model": m, "spec": spec, "batch": batch, "threads": threads,
                           "kiln_seconds": statistics.median(kiln_t), "ort_seconds": statistics.median(ort_t),
                           "kiln_runs": kiln_t, "ort_runs": ort_t, "max_abs_diff": max_diff}
                    row["ort_over_kiln"] = row["ort_seconds"] / row["kiln_seconds"]
                    if batch <= 8:
                        row["bandwidth_floor_seconds"] = floor
                    if call_floor is not None:
                        row["ort_identity_call_seconds"] = call_floor
                    results.append(row)
                    extra = f"  (weights' floor {1e6 * floor:.1f} us)" if batch <= 8 else ""
                    if call_floor is not None and batch <= 8:
                        extra += f"  (ORT's call of an Identity graph: {1e6 * call_floor:.1f} us)"
                    print(f"  {m} batch {batch:5} threads {threads}: kiln {1e6 * row['kiln_seconds']:10.1f} us  "
                          f"ORT {1e6 * row['ort_seconds']:10.1f} us  ORT/kiln {row['ort_over_kiln']:.2f}{extra}",
                          flush=True)
                del sess
                kiln.lib.kiln_model_release(model)
                kiln.lib.kiln_context_release(ctx)

    print("\n| model | batch | threads | kiln µs | ORT µs | ORT time / kiln time |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['spec']} | {r['batch']} | {r['threads']} | {1e6 * r['kiln_seconds']:,.1f} | "
              f"{1e6 * r['ort_seconds']:,.1f} | {r['ort_over_kiln']:.2f} |")
    report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "command": " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:]),
              "cpu": cpu_name, "extensions": extensions, "kiln_kernels": kiln_kernels(flags),
              "onnxruntime": ort.__version__, "runs": args.runs, "min_seconds": args.min_seconds,
              "settle_seconds": args.settle_seconds,
              "load_average": [round(x, 2) for x in os.getloadavg()], "results": results}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
        print(f"written {args.out}")
    print(json.dumps({"ort": report}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
