#!/usr/bin/env python3
"""Runs kiln and PyTorch on the same workloads, alternating, and prints a table.

  python3 bench/run.py [--build-dir build] [--repeats 3] [--epochs 3] [--device cpu|cuda]
                       [--workloads A,B,C] [--data DIR] [--out bench/results/NAME.json]

Workloads (Fashion-MNIST, SGD lr 0.1, ReLU MLPs):
  A  784-32-10, batch 128, fp32
  B  784-1024-1024-10, batch 256 on the CPU; on a GPU batch 1024 in fp32, tf32
     and bf16 (rows B-fp32, B-tf32, B-bf16; PyTorch at the same precision)
  W  (GPU) 4096-4096-4096-4096-4096-10, batch 8192, bf16, synthetic data:
     step time, TFLOP/s and fraction_of_cublas against bench/cublas_gemm_bench
  C  inference of A's and B's models at batch 1, 64 and 4096: samples/s and
     the median latency of one call (rows C-A, C-B)
Default workloads: A,B,C on the CPU, A,B,W,C on a GPU.

PyTorch loops: resident (the data in one tensor on the device), dataloader
(the tutorials' DataLoader loop; pin_memory and non_blocking on a GPU), and on
a GPU graph (a whole step captured with torch.cuda.graphs) and compile
(torch.compile(mode="reduce-overhead"), time-boxed by --compile-timeout; a
failure is recorded, not fatal). On a GPU kiln also runs as kiln-plain, with
its fast path off (--fast-path 0: no CUDA graphs, cuBLASLt epilogues or cuDNN),
and A and B as kiln-cudnn, with everything on, cuDNN included: its lines after
the table give, per Linear op of each step program, cuDNN's time against the
cuBLASLt path's and which one the plan took (kiln_bench --programs 1); and A
as kiln-narrow, the default with the narrow step (its forward, loss and
backward as two of kiln's own kernels, KILN_FAST_PATH_NARROW).

Each run is its own process (so peak memory is per run); repeat r uses seed r
on every side. Every training run first does --warmup untimed epochs (default
1), so lazy loading and first-use costs stay out of the timed epochs; the
timed epochs include the shuffle. Times are medians over all epochs of all
runs, accuracies the mean over the runs' seeds; time_over_kiln is a row's time
over kiln's in the same run (above 1 means kiln is faster).

FLOPs: training counts what a step computes per sample (train_flops): 6 x
parameters (2 for the forward product, 4 for the two backward ones, per
weight; biases counted alike) less 2 x the first layer's weights, for its
input gradient, which neither side computes (counted, as the usual 6 x
parameters does, 784-1024-1024-10 ran at 105% of a Zen 5 core's FMA peak);
inference 2 x parameters. On the CPU, fraction_of_peak is model FLOP/s over
the FMA peak that bench/fma_peak measures in the same run (fp32, every core):
for a training workload, the median of the peaks measured right before and
right after each of kiln's runs of it (a VM's clock drifts within minutes;
the JSON keeps every figure), for inference the one measured first. With
two threads or more, bench/core_round_trip's figure is taken at the same
moments (_workload.core_round_trip_ns): what sharing a cache line between
two cores costs then, which a two-thread step's time follows on a VM.
Run it on an idle machine; the load average before and after is recorded.
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def torch_python(preferred):
    """The Python whose PyTorch is the reference, and how to name it: the first
    of --torch-python, $KILN_BENCH_PYTHON, this interpreter and Debian's
    /usr/bin/python3 that imports a PyTorch 2.x (from PyPI, in the venv the
    README's command makes); failing that, the first that imports any PyTorch
    (Debian's python3-torch 1.13), named as the fallback it is. (None, None)
    when none does."""
    found = []
    for exe in (preferred, os.environ.get("KILN_BENCH_PYTHON"), sys.executable, "/usr/bin/python3"):
        if not exe or not shutil.which(exe) or exe in (f[0] for f in found):
            continue
        out = subprocess.run([exe, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip():
            found.append((exe, out.stdout.strip()))
    for exe, version in found:
        if int(version.split(".")[0]) >= 2:
            return exe, f"PyTorch {version} (PyPI)"
    if found:
        exe, version = found[0]
        return exe, f"PyTorch {version} (FALLBACK: Debian's python3-torch; the reference is PyTorch 2.x from PyPI)"
    return None, None


def torch_version(py):
    """The reference's version and the BLAS it was built with, for the record."""
    code = ("import torch; c = torch.__config__.show(); "
            "b = c.split('BLAS_INFO=')[1].split(',')[0] if 'BLAS_INFO=' in c else '?'; "
            "g = f' CUDA {torch.version.cuda} cuDNN {torch.backends.cudnn.version()}' "
            "if torch.cuda.is_available() else ''; print(torch.__version__, b + g)")
    out = subprocess.run([py, "-c", code], capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def run_json(cmd, timeout=None):
    """The last line of cmd's stdout as JSON, or {"error": why} when it fails."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        tail = (out.stderr.strip().splitlines() or ["(no output)"])[-3:]
        return {"error": f"exit status {out.returncode}: " + " | ".join(tail)}
    try:
        return json.loads(lines[-1])
    except json.JSONDecodeError:
        return {"error": "no JSON on stdout: " + lines[-1][:200]}


def machine():
    model = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cpu": model, "cores": os.cpu_count(), "memory_gib": round(mem, 1), "os": platform.platform()}


def commit():
    r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return (r.stdout.strip() or "unknown") + ("-dirty" if dirty else "")


def load_average():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def gpu_info(py):
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.TimeoutExpired):
        pass
    if py:
        out = subprocess.run([py, "-c", "import torch; print(torch.cuda.get_device_name(0))"],
                             capture_output=True, text=True)
        return out.stdout.strip() or "unknown"
    return "unknown"


def params_of(sizes):
    return sum(sizes[i] * sizes[i + 1] + sizes[i + 1] for i in range(len(sizes) - 1))


def train_flops(sizes):
    """FLOPs of one trained sample: forward, weight and input gradients, the
    first layer's input gradient left out (nothing computes it)."""
    return 6 * params_of(sizes) - 2 * sizes[0] * sizes[1]


MODELS = {"A": [784, 32, 10], "B": [784, 1024, 1024, 10], "W": [4096, 4096, 4096, 4096, 4096, 10]}


def summarize(runs, flops_per_sample, peak_gflops):
    good = [r for r in runs if "error" not in r]
    errors = [r["error"] for r in runs if "error" in r]
    if not good:
        return {"error": errors[0], "errors": errors}
    times = [t for r in good for t in r["epoch_seconds"]]
    med = statistics.median(times)
    rate = good[0]["samples_per_second"] * good[0]["median_epoch_seconds"] / med
    out = {
        "median_epoch_seconds": med,
        "samples_per_second": rate,
        "peak_rss_mib": max(r["peak_rss_mib"] for r in good),
        # Each repeat uses another seed (the same for every side), so this is
        # the mean over seeds, not one seed's luck.
        "test_accuracy": statistics.mean(r["test_accuracy"] for r in good),
        "model_gflops_per_second": flops_per_sample * rate * 1e-9,
    }
    if peak_gflops:
        out["fraction_of_peak"] = out["model_gflops_per_second"] / peak_gflops
    if errors:
        out["errors"] = errors
    out["runs"] = runs
    return out


def cudnn_choices(summary):
    """The per-op cuDNN decisions of a kiln-cudnn run's first good repeat:
    each compiled program's "cudnn: ..." part, one op per entry, such as
    "linear 128x784->32 relu f32: cudnn (cudnn 0.0101 ms, other 0.0123 ms)";
    or why cuDNN was unavailable. Empty without programs."""
    for run in summary.get("runs", []):
        if "programs" not in run:
            continue
        choices = []
        for program in run["programs"]:
            # "compiled LABEL: <paths> [op: choice (...); op: ...], graphs ..."
            label, _, text = program.partition(": ")
            start, end = text.find(" ["), text.rfind("]")
            if start < 0 or end < start:
                continue
            for part in text[start + 2:end].split("; "):
                choices.append(f"{label.removeprefix('compiled ')}: {part}")
        return choices
    return []


DEADLINE = None  # time.monotonic() after which no run starts (--time-budget)


def alternate(impls, repeats, label, timeouts=None, probe=None, probes=None):
    """Runs every impl once per repeat, alternating (so drift hits every side
    alike), with seed r in repeat r. An impl that failed by timing out is not
    run again (a slow compile would only time out again); past --time-budget
    no run starts and the runs left are recorded as skipped. With a probe
    (a function returning a dict of figures), kiln's runs are each bracketed
    by a call to it, whose dicts are appended to `probes`."""
    timeouts = timeouts or {}
    runs = {k: [] for k in impls}

    def probed():
        if probe:
            probes.append(probe())

    for rep in range(repeats):
        for k, cmd in impls.items():
            if runs[k] and "timed out" in runs[k][-1].get("error", ""):
                continue
            timeout = timeouts.get(k)
            if DEADLINE is not None:
                left = int(DEADLINE - time.monotonic())
                if left < 5:
                    runs[k].append({"error": "skipped: --time-budget spent"})
                    continue
                timeout = min(timeout or left, left)
            if k == "kiln":
                probed()
            r = run_json(cmd + ["--seed", str(rep + 1)], timeout)
            if k == "kiln":
                probed()
            runs[k].append(r)
            if "error" in r:
                print(f"  {label} {k}: FAILED: {r['error']}", flush=True)
            elif "median_epoch_seconds" in r:
                print(f"  {label} {k}: {r['median_epoch_seconds']:.3f} s/epoch", flush=True)
            elif "median_step_seconds" in r:
                print(f"  {label} {k}: {1e3 * r['median_step_seconds']:.3f} ms/step", flush=True)
    return runs


def cpu_extensions():
    """The vector extensions that decide kiln's kernels and the FMA peak."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next(l for l in f if l.startswith("flags")).split(":", 1)[1].split()
    except (OSError, StopIteration):
        return []
    return [x for x in ("avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_bf16") if x in flags]


def ort_comparison(args, py, thread_counts):
    """bench/ort_bench.py at every thread count, with the reference's Python
    (the venv that has onnxruntime too); skipped with its message elsewhere."""
    cmd = [py or sys.executable, os.path.join(HERE, "ort_bench.py"), "--build-dir", args.build_dir,
           "--threads", ",".join(map(str, thread_counts)), "--runs", str(max(5, args.repeats))]
    print("  ORT: " + " ".join(cmd[1:]), flush=True)
    out = subprocess.run(cmd, capture_output=True, text=True)
    lines = out.stdout.strip().splitlines()
    for line in lines[:-1]:
        print("  " + line, flush=True)
    if out.returncode != 0 or not lines:
        return {"error": f"exit status {out.returncode}: " + " | ".join(out.stderr.strip().splitlines()[-3:])}
    try:
        return json.loads(lines[-1])["ort"]
    except (json.JSONDecodeError, KeyError):
        return {"skipped": lines[-1][:300]}


def train_peak_memory(args):
    """Peak RSS of the README's main job, a CPU-only `kiln train` (5 epochs of
    784-32-10 with validation), as the kernel counts it for the child. Where
    the CUDA plugin is built and the CUDA libraries are installed, this
    includes whatever of them the plugin loads on a machine without a driver
    (the GPU-readiness issue's driver probe is meant to keep them out)."""
    cli = os.path.join(args.build_dir, "tools", "kiln")
    if not os.path.exists(cli):
        return {"error": f"{cli} not found"}
    cmd = [cli, "train", "--data", args.data, "--device", "cpu", "--quiet"]
    env = dict(os.environ, KILN_BACKEND_PATH=args.build_dir)
    start = time.monotonic()
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(child.pid, 0)
    err = child.stderr.read().decode(errors="replace").strip()
    child.stderr.close()
    res = {"command": " ".join(["kiln"] + cmd[1:]), "seconds": round(time.monotonic() - start, 2),
           "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
           "cuda_plugin_built": os.path.exists(os.path.join(args.build_dir, "libkiln_cuda.so"))}
    if os.waitstatus_to_exitcode(status) != 0:
        res["error"] = f"exit status {os.waitstatus_to_exitcode(status)}: {err[-300:]}"
    print(f"  kiln train peak RSS: {res['peak_rss_mib']} MiB (CUDA plugin built: {res['cuda_plugin_built']})",
          flush=True)
    return res


def markdown_tables(report, json_path, json_link):
    """The README's Performance tables from one report: PyTorch (training and
    inference) and ONNX Runtime (inference), with what they were measured on.
    json_path names the JSON from the repository's root, json_link reaches it
    from the folder the tables are written to."""
    m = report["machine"]
    lines = [f"Measured {report['date'][:10]} at commit {report['commit']} with `{report['command']}` on "
             f"{m['cpu']} ({m['cores']} cores; {', '.join(report['cpu_extensions'])}), {m['memory_gib']} GiB; "
             f"load average {report['load_average_before']} before, {report['load_average_after']} after; "
             f"reference {report['reference']}; JSON: [`{json_path}`]({json_link}).", ""]
    res = report["results"]
    lines += ["| workload | threads | implementation | s / epoch | samples/s | peak MiB | test accuracy | GFLOP/s | "
              "of FMA peak | PyTorch time / kiln time |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, rows in res.items():
        if name.startswith("C-") or name in ("W", "ORT", "M"):
            continue
        wl = rows["_workload"]
        kiln_t = rows["kiln"].get("median_epoch_seconds")
        torch_t = [r["median_epoch_seconds"] for k, r in rows.items() if k.startswith("torch") and
                   "median_epoch_seconds" in r]
        for k, r in rows.items():
            if k.startswith("_"):
                continue
            if "error" in r:
                lines.append(f"| {wl['spec']}, batch {wl['batch']} | {wl.get('threads', '')} | {k} | FAILED | | | | | | |")
                continue
            frac = f"{100 * r['fraction_of_peak']:.1f}%" if "fraction_of_peak" in r else "-"
            ratio = f"{min(torch_t) / kiln_t:.2f}" if k == "kiln" and torch_t and kiln_t else (
                f"{r['time_over_kiln']:.2f}" if "time_over_kiln" in r else "-")
            lines.append(f"| {wl['spec']}, batch {wl['batch']} | {wl.get('threads', '')} | {k} | "
                         f"{r['median_epoch_seconds']:.3f} | {r['samples_per_second']:,.0f} | {r['peak_rss_mib']:.0f} | "
                         f"{100 * r['test_accuracy']:.2f}% | {r['model_gflops_per_second']:.2f} | {frac} | {ratio} |")
    around = [f"{rows['_workload']['spec']} on {rows['_workload'].get('threads', '')} thread(s) "
              f"{p['median']:.1f} ({min(p['before_and_after_kiln_runs']):.1f} to "
              f"{max(p['before_and_after_kiln_runs']):.1f})"
              for name, rows in res.items() if (p := rows.get("_workload", {}).get("fma_peak_gflops"))]
    trips = [f"{rows['_workload']['spec']} {min(t):.0f} to {max(t):.0f}"
             for name, rows in res.items() if (t := rows.get("_workload", {}).get("core_round_trip_ns"))]
    lines += ["", "(kiln's row: the fastest PyTorch loop's time over kiln's." +
              (" Of FMA peak: over the median of bench/fma_peak's figures right before and after each of kiln's "
               "runs of the workload, GFLOP/s: " + "; ".join(around) + "." if around else "") +
              (" Two threads: bench/core_round_trip's figures at the same moments, ns: " + "; ".join(trips) + "."
               if trips else "") + ")", "",
              "| model | threads | batch | kiln samples/s | PyTorch samples/s | kiln / PyTorch | kiln latency µs | "
              "PyTorch latency µs |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, rows in res.items():
        if not name.startswith("C-") or "samples_per_second" not in rows.get("kiln", {}):
            continue
        kr, tr = rows["kiln"], rows.get("torch", {})
        for b, k_sps in kr["samples_per_second"].items():
            t_sps = tr.get("samples_per_second", {}).get(b)
            t_lat = tr.get("latency_seconds", {}).get(b)
            cells = [rows["_workload"]["spec"], rows["_workload"].get("threads", ""), b, f"{k_sps:,.0f}",
                     f"{t_sps:,.0f}" if t_sps else "-", f"{k_sps / t_sps:.2f}" if t_sps else "-",
                     f"{1e6 * kr['latency_seconds'][b]:,.0f}", f"{1e6 * t_lat:,.0f}" if t_lat else "-"]
            lines.append("| " + " | ".join(map(str, cells)) + " |")
    ort = res.get("ORT", {})
    if "results" in ort:
        lines += ["", f"ONNX Runtime {ort['onnxruntime']} (kiln's kernels: {ort['kiln_kernels']}; medians of "
                      f"{ort['runs']} interleaved runs; µs per call, each call returning a new output):", "",
                  "| model | batch | threads | kiln µs | ORT µs | ORT time / kiln time | weights' read floor µs, 1 thread "
                  "| ORT's Identity call µs |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in ort["results"]:
            floor = f"{1e6 * r['bandwidth_floor_seconds']:,.1f}" if "bandwidth_floor_seconds" in r else "-"
            call = f"{1e6 * r['ort_identity_call_seconds']:,.1f}" if "ort_identity_call_seconds" in r else "-"
            lines.append(f"| {r['spec']} | {r['batch']} | {r['threads']} | {1e6 * r['kiln_seconds']:,.1f} | "
                         f"{1e6 * r['ort_seconds']:,.1f} | {r['ort_over_kiln']:.2f} | {floor} | {call} |")
    elif ort:
        lines += ["", f"ONNX Runtime: {ort.get('error') or ort.get('skipped')}"]
    mem = res.get("M")
    if mem and "peak_rss_mib" in mem:
        lines += ["", f"`{mem['command']}` peaked at {mem['peak_rss_mib']} MiB of RSS (CUDA plugin built: "
                      f"{'yes' if mem['cuda_plugin_built'] else 'no'})."]
    return "\n".join(lines) + "\n"


def measure(args, gpu, workloads, loops, kiln, py, threads, suffixed, results, peaks):
    """Runs the workloads with `threads` CPU threads on every side, into
    results (names suffixed " x<threads>" when several counts are measured);
    True when a kiln run failed."""
    peak = None
    fma = os.path.join(args.build_dir, "bench", "fma_peak")
    if not gpu:
        if os.path.exists(fma):
            peak = run_json([fma, "--threads", str(threads)])
            print(f"  CPU FMA peak, {threads} thread(s): {peak.get('gflops', 'FAILED')} GFLOP/s "
                  f"({peak.get('isa', peak.get('error'))})", flush=True)
            if "error" in peak:
                peak = None
            else:
                peaks[threads] = peak
        else:
            print(f"bench: {fma} not found; no fraction_of_peak (build the fma_peak target)")
    peak_gflops = peak["gflops"] if peak else None

    trip = os.path.join(args.build_dir, "bench", "core_round_trip")

    def machine_probe():
        """The machine's state now: the FMA peak ("gflops"), for the training
        runs' fractions (this machine's clock drifts by several percent within
        minutes, so a training workload's fraction is over the median of the
        peaks measured right before and after each of kiln's runs of it, not
        over the one above), and with several threads the cores' round trip
        ("round_trip_ns"; bench/core_round_trip.c says why). A figure that
        could not be measured is left out."""
        runs = [run_json([fma, "--threads", str(threads)])]
        if threads > 1 and os.path.exists(trip):
            runs.append(run_json([trip]))
        return {k: r[k] for r in runs for k in ("gflops", "round_trip_ns") if k in r}

    common = ["--device", args.device, "--threads", str(threads), "--data", args.data]
    torch_bench = [py, os.path.join(HERE, "torch_bench.py")] if py else None
    epochs = ["--epochs", str(args.epochs), "--warmup", str(args.warmup)]
    timeouts = {"torch-compile": args.compile_timeout}
    failed = False
    own = {}

    def training(name, w, batch, precision):
        nonlocal failed
        extra = ["--batch", str(batch), "--precision", precision]
        impls = {"kiln": [kiln, "--workload", w] + epochs + extra + common}
        if gpu:
            impls["kiln-plain"] = impls["kiln"] + ["--fast-path", "0"]
            # Everything on, cuDNN included (off by default until measured):
            # its programs say, per Linear op, cuDNN's time against the
            # cuBLASLt path's and which the plan took.
            impls["kiln-cudnn"] = impls["kiln"] + ["--fast-path", "7", "--programs", "1"]
            # The default plus the narrow step's two kernels (off by default
            # until measured), which only a one-hidden-layer model takes.
            if w == "A":
                impls["kiln-narrow"] = impls["kiln"] + ["--fast-path", "11", "--programs", "1"]
        if torch_bench:
            for loop in loops:
                if loop == "dataloader" and w != "A" and gpu:
                    continue  # the DataLoader loop is the tutorial's, for A
                impls[f"torch-{loop}"] = torch_bench + ["--workload", w, "--loop", loop] + epochs + extra + common
        states = []
        runs = alternate(impls, args.repeats, name, {k: timeouts.get(k, args.timeout) for k in impls},
                         machine_probe if peak_gflops else None, states)
        probes = [p["gflops"] for p in states if "gflops" in p]
        trips = [p["round_trip_ns"] for p in states if "round_trip_ns" in p]
        flops = train_flops(MODELS[w])
        around = statistics.median(probes) if probes else peak_gflops
        res = {k: summarize(v, flops, around) for k, v in runs.items()}
        failed |= any("error" in r for k, r in res.items() if k.startswith("kiln"))
        base = res["kiln"].get("median_epoch_seconds")
        for r in res.values():
            if base and "median_epoch_seconds" in r:
                r["time_over_kiln"] = r["median_epoch_seconds"] / base
        res["_workload"] = {"spec": "-".join(map(str, MODELS[w])), "batch": batch, "precision": precision,
                            "parameters": params_of(MODELS[w]), "flops_per_sample": flops}
        if probes:
            res["_workload"]["fma_peak_gflops"] = {"median": around, "before_and_after_kiln_runs": probes}
            print(f"  {name}: FMA peak around kiln's runs {min(probes)} to {max(probes)} GFLOP/s, "
                  f"median {around}", flush=True)
        if trips:
            res["_workload"]["core_round_trip_ns"] = trips
            print(f"  {name}: cores' round trip around kiln's runs {min(trips)} to {max(trips)} ns", flush=True)
        own[name] = res

    for w in workloads:
        if w == "A":
            training("A", "A", 128, "fp32")
        elif w == "B" and not gpu:
            training("B", "B", 256, "fp32")
        elif w == "B":
            for prec in args.precisions.split(","):
                training(f"B-{prec}", "B", 1024, prec)
        elif w == "W":
            if not gpu:
                print("bench: W is a GPU workload; skipped on the CPU")
                continue
            sizes, batch = MODELS["W"], 8192
            spec = "-".join(map(str, sizes))
            wargs = ["--workload", "W", "--spec", spec, "--batch", str(batch), "--precision", "bf16",
                     "--steps", "20", "--windows", "7", "--device", args.device]
            impls = {"kiln": [kiln] + wargs, "kiln-plain": [kiln] + wargs + ["--fast-path", "0"]}
            if torch_bench:
                impls["torch-resident"] = torch_bench + wargs + ["--loop", "resident"]
                impls["torch-graph"] = torch_bench + wargs + ["--loop", "graph"]
            cublas = os.path.join(args.build_dir, "bench", "cublas_gemm_bench")
            if os.path.exists(cublas):
                impls["cublas"] = [cublas, "--spec", spec, "--batch", str(batch), "--reps", "20", "--windows", "7"]
            else:
                print(f"bench: {cublas} not found (built with KILN_BUILD_CUDA); no fraction_of_cublas")
            runs = alternate(impls, args.repeats, "W", {k: args.timeout for k in impls})
            flops = train_flops(sizes) * batch  # per step
            res = {}
            for k, v in runs.items():
                good = [r for r in v if "error" not in r]
                if not good:
                    res[k] = {"error": v[0]["error"], "runs": v}
                    continue
                med = statistics.median(r["step_seconds" if k == "cublas" else "median_step_seconds"] for r in good)
                res[k] = {"median_step_seconds": med, "runs": v}
                if k != "cublas":
                    res[k]["samples_per_second"] = batch / med
                    res[k]["model_tflops_per_second"] = flops / med * 1e-12
                else:
                    res[k]["gemm_tflops_per_second"] = good[0]["gemm_flops_per_step"] / med * 1e-12
            failed |= "error" in res.get("kiln", {"error": 1})
            if "cublas" in res and "median_step_seconds" in res["cublas"]:
                for k in res:
                    if k != "cublas" and "median_step_seconds" in res[k]:
                        # The same products as plain cuBLAS calls over the whole step's time.
                        res[k]["fraction_of_cublas"] = res["cublas"]["median_step_seconds"] / res[k]["median_step_seconds"]
            base = res.get("kiln", {}).get("median_step_seconds")
            for r in res.values():
                if base and "median_step_seconds" in r:
                    r["time_over_kiln"] = r["median_step_seconds"] / base
            res["_workload"] = {"spec": spec, "batch": batch, "precision": "bf16", "parameters": params_of(sizes),
                                "flops_per_step": flops,
                                "flop_count": "6 x parameters x batch per step (model); cublas: 2mnk summed over "
                                              "the step's forward, weight-gradient and input-gradient products "
                                              "(none for the first layer's input)"}
            own["W"] = res
        elif w == "C":
            for m in ("A", "B"):
                impls = {"kiln": [kiln, "--workload", "C", "--model", m] + common}
                if torch_bench:
                    impls["torch"] = torch_bench + ["--workload", "C", "--model", m] + common
                runs = alternate(impls, args.repeats, f"C-{m}", {k: args.timeout for k in impls})
                flops = 2 * params_of(MODELS[m])
                res = {}
                for k, v in runs.items():
                    good = [r for r in v if "error" not in r]
                    if not good:
                        res[k] = {"error": v[0]["error"]}
                        continue
                    res[k] = {"samples_per_second": {b: statistics.median(r["samples_per_second"][b] for r in good)
                                                     for b in good[0]["samples_per_second"]},
                              "latency_seconds": {b: statistics.median(r["latency_seconds"][b] for r in good)
                                                  for b in good[0]["latency_seconds"]},
                              "peak_rss_mib": max(r["peak_rss_mib"] for r in good)}
                    if peak_gflops:
                        res[k]["fraction_of_peak"] = {b: flops * x * 1e-9 / peak_gflops
                                                      for b, x in res[k]["samples_per_second"].items()}
                failed |= "error" in res["kiln"]
                res["_workload"] = {"spec": "-".join(map(str, MODELS[m])), "parameters": params_of(MODELS[m]),
                                    "flops_per_sample": flops}
                own[f"C-{m}"] = res
        elif w not in ("ORT", "M"):
            sys.exit(f"bench: unknown workload {w}")

    for name, res in own.items():
        if "_workload" in res:
            res["_workload"]["threads"] = threads
        results[f"{name} x{threads}" if suffixed else name] = res
    return failed


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1, help="untimed epochs before the timed ones")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", default=None,
                   help="CPU thread counts, each measured in turn (default 1,2; on a GPU 1: the host's threads "
                        "only feed it)")
    p.add_argument("--torch-python", default=None, help="a Python with PyTorch 2.x (default: see torch_python)")
    p.add_argument("--markdown", default=None, help="also write the README's tables to this file")
    p.add_argument("--workloads", default=None, help="default A,B,C (CPU) or A,B,W,C (GPU)")
    p.add_argument("--precisions", default="fp32,tf32,bf16", help="B's precisions on a GPU")
    p.add_argument("--loops", default=None,
                   help="PyTorch loops (default resident,dataloader; on a GPU also graph,compile)")
    p.add_argument("--compile-timeout", type=int, default=300, help="seconds for one torch.compile run")
    p.add_argument("--timeout", type=int, default=1800, help="seconds for any other run")
    p.add_argument("--time-budget", type=int, default=None,
                   help="seconds for the whole benchmark: later runs are skipped, the JSON still written")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    global DEADLINE
    if args.time_budget:
        DEADLINE = time.monotonic() + args.time_budget
    gpu = args.device.startswith("cuda")
    workloads = (args.workloads or ("A,B,W,C" if gpu else "A,B,C,ORT,M")).split(",")
    loops = (args.loops or ("resident,dataloader,graph,compile" if gpu else "resident,dataloader")).split(",")

    kiln = os.path.join(args.build_dir, "bench", "kiln_bench")
    if not os.path.exists(kiln):
        sys.exit(f"bench: {kiln} not found; build first: cmake --build {args.build_dir} --target kiln_bench")
    py, reference = torch_python(args.torch_python)
    if not py:
        print("bench: torch is not importable (see the README: a venv with PyTorch 2.x); running kiln alone")
    else:
        print(f"bench: reference {reference} from {py}", flush=True)
    load_before = load_average()
    thread_counts = [int(t) for t in str(args.threads or ("1" if gpu else "1,2")).split(",")]
    results = {}
    peaks = {}
    failed = False
    for threads in thread_counts:
        failed |= measure(args, gpu, workloads, loops, kiln, py, threads, len(thread_counts) > 1, results, peaks)
    if "ORT" in workloads and not gpu:
        results["ORT"] = ort_comparison(args, py, thread_counts)
    if "M" in workloads and not gpu:
        results["M"] = train_peak_memory(args)

    print(f"\n{'workload':10} {'impl':18} {'s/epoch':>9} {'samples/s':>11} {'peak MiB':>9} {'test acc':>9} "
          f"{'GFLOP/s':>9} {'of peak':>8} {'time/kiln':>9}")
    for w, res in results.items():
        if w.startswith("C-") or w in ("W", "ORT", "M"):
            continue
        for k, r in res.items():
            if k.startswith("_"):
                continue
            if "error" in r:
                print(f"{w:10} {k:18} FAILED: {r['error']}")
                continue
            frac = f"{100 * r['fraction_of_peak']:7.1f}%" if "fraction_of_peak" in r else f"{'-':>8}"
            ratio = f"{r['time_over_kiln']:8.2f}x" if "time_over_kiln" in r else f"{'-':>9}"
            print(f"{w:10} {k:18} {r['median_epoch_seconds']:9.3f} {r['samples_per_second']:11.0f} "
                  f"{r['peak_rss_mib']:9.1f} {100 * r['test_accuracy']:8.2f}% {r['model_gflops_per_second']:9.2f} "
                  f"{frac} {ratio}")
    for w, res in results.items():
        for line in cudnn_choices(res.get("kiln-cudnn", {})):
            print(f"{w:10} kiln-cudnn  {line}")
    if "W" in results:
        for k, r in results["W"].items():
            if k.startswith("_"):
                continue
            if "error" in r:
                print(f"{'W':10} {k:18} FAILED: {r['error']}")
                continue
            line = f"{'W':10} {k:18} {1e3 * r['median_step_seconds']:9.3f} ms/step"
            if "model_tflops_per_second" in r:
                line += f"  {r['model_tflops_per_second']:7.1f} TFLOP/s (model)"
            if "gemm_tflops_per_second" in r:
                line += f"  {r['gemm_tflops_per_second']:7.1f} TFLOP/s (GEMMs)"
            if "fraction_of_cublas" in r:
                line += f"  fraction_of_cublas {r['fraction_of_cublas']:.2f}"
            print(line)
    for w, res in results.items():
        if not w.startswith("C-") or "samples_per_second" not in res["kiln"]:
            continue
        for b in res["kiln"]["samples_per_second"]:
            line = f"{w:10} batch {b:>5}   "
            for k, r in res.items():
                if k.startswith("_") or "error" in r:
                    continue
                line += (f" {k}: {r['samples_per_second'][b]:12.0f}/s {1e6 * r['latency_seconds'][b]:9.1f} us")
            if "samples_per_second" in res.get("torch", {}):
                line += f"  ratio {res['kiln']['samples_per_second'][b] / res['torch']['samples_per_second'][b]:.2f}x"
            print(line)

    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit(),
        "command": " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:]),
        "machine": machine(),
        "device": args.device,
        "reference": f"{reference}: {torch_version(py)} (version, BLAS_INFO[, CUDA, cuDNN])" if py else "none",
        "threads": thread_counts,
        "cpu_extensions": cpu_extensions(),
        "repeats": args.repeats,
        "epochs": args.epochs,
        "warmup_epochs": args.warmup,
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "flop_count": "training 6 x parameters per sample less 2 x the first layer's weights (its input gradient, "
                      "which nothing computes), inference 2 x parameters per sample",
        "results": results,
    }
    if gpu:
        report["gpu"] = gpu_info(py)
    if peaks:
        report["cpu_peak"] = {str(t): v for t, v in peaks.items()}
    out = args.out or os.path.join(HERE, "results", f"{args.device.replace(':', '')}-{report['date'][:10]}.json")
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            link = os.path.relpath(out, os.path.dirname(os.path.abspath(args.markdown)))
            f.write(markdown_tables(report, os.path.relpath(out, ROOT), link))
        print(f"written {os.path.relpath(args.markdown, ROOT)}")
    print(f"\nload average before {load_before}, after {report['load_average_after']}")
    print(f"written {os.path.relpath(out, ROOT)}")
    if failed:
        sys.exit("bench: a kiln run failed (see the FAILED lines and the JSON)")


if __name__ == "__main__":
    main()
