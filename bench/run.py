#!/usr/bin/env python3
"""Runs kiln and PyTorch on the same workloads, alternating, and prints a table.

  python3 bench/run.py [--build-dir build] [--repeats 3] [--epochs 3] [--device cpu]
                       [--workloads A,B,C] [--out bench/results/NAME.json]

Each run is its own process (so peak memory is per run); repeat r uses seed r
on every side. Times are medians over all epochs of all runs, accuracies the
mean over the runs' seeds; the ratio is PyTorch's time over kiln's (above 1
means kiln is faster). Run it on an idle machine.
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def torch_python():
    """A Python that can import torch (Debian's python3-torch lives in /usr/bin/python3)."""
    for exe in (sys.executable, "/usr/bin/python3"):
        if exe and shutil.which(exe) and subprocess.run([exe, "-c", "import torch"], capture_output=True).returncode == 0:
            return exe
    return None


def torch_version(py):
    """The reference's version and the BLAS it was built with, for the record."""
    code = "import torch; print(torch.__version__, torch.__config__.show().split('BLAS_INFO=')[1].split(',')[0])"
    out = subprocess.run([py, "-c", code], capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def run_json(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


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


def summarize(runs):
    times = [t for r in runs for t in r["epoch_seconds"]]
    med = statistics.median(times)
    return {
        "median_epoch_seconds": med,
        "samples_per_second": runs[0]["samples_per_second"] * runs[0]["median_epoch_seconds"] / med,
        "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
        # Each repeat uses another seed (the same for every side), so this is
        # the mean over seeds, not one seed's luck.
        "test_accuracy": statistics.mean(r["test_accuracy"] for r in runs),
        "runs": runs,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--workloads", default="A,B,C")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--out", default=None)
    args = p.parse_args()

    kiln = os.path.join(args.build_dir, "bench", "kiln_bench")
    if not os.path.exists(kiln):
        sys.exit(f"bench: {kiln} not found; build first: cmake --build {args.build_dir} --target kiln_bench")
    py = torch_python()
    if not py:
        print("bench: torch is not importable (apt-get install python3-torch); running kiln alone")
    common = ["--device", args.device, "--threads", str(args.threads), "--data", args.data]
    torch_common = ["--threads", str(args.threads), "--data", args.data]
    results = {}
    for w in args.workloads.split(","):
        if w in ("A", "B"):
            impls = {"kiln": [kiln, "--workload", w, "--epochs", str(args.epochs)] + common}
            if py:
                for loop in ("resident", "dataloader"):
                    impls[f"torch-{loop}"] = [py, os.path.join(HERE, "torch_bench.py"), "--workload", w,
                                              "--epochs", str(args.epochs), "--loop", loop] + torch_common
            runs = {k: [] for k in impls}
            for rep in range(args.repeats):  # alternate so drift hits every side alike
                for k, cmd in impls.items():
                    runs[k].append(run_json(cmd + ["--seed", str(rep + 1)]))
                    print(f"  {w} {k}: {runs[k][-1]['median_epoch_seconds']:.3f} s/epoch", flush=True)
            results[w] = {k: summarize(v) for k, v in runs.items()}
        elif w == "C":
            for m in ("A", "B"):
                impls = {"kiln": [kiln, "--workload", "C", "--model", m] + common}
                if py:
                    impls["torch"] = [py, os.path.join(HERE, "torch_bench.py"), "--workload", "C", "--model", m] + torch_common
                runs = {k: [] for k in impls}
                for _ in range(args.repeats):
                    for k, cmd in impls.items():
                        runs[k].append(run_json(cmd))
                results[f"C-{m}"] = {
                    k: {"samples_per_second": {b: statistics.median(r["samples_per_second"][b] for r in v)
                                               for b in v[0]["samples_per_second"]},
                        "peak_rss_mib": max(r["peak_rss_mib"] for r in v)}
                    for k, v in runs.items()}
        else:
            sys.exit(f"bench: unknown workload {w}")

    print(f"\n{'workload':10} {'impl':18} {'s/epoch':>9} {'samples/s':>11} {'peak MiB':>9} {'test acc':>9} {'torch/kiln':>10}")
    for w, res in results.items():
        if w.startswith("C-"):
            continue
        for k, r in res.items():
            ratio = r["median_epoch_seconds"] / res["kiln"]["median_epoch_seconds"]
            print(f"{w:10} {k:18} {r['median_epoch_seconds']:9.3f} {r['samples_per_second']:11.0f} "
                  f"{r['peak_rss_mib']:9.1f} {100 * r['test_accuracy']:8.2f}% {ratio:9.2f}x")
    for w, res in results.items():
        if not w.startswith("C-"):
            continue
        for b in res["kiln"]["samples_per_second"]:
            line = f"{w:10} batch {b:>5}   "
            for k, r in res.items():
                line += f" {k}: {r['samples_per_second'][b]:12.0f}/s"
            if "torch" in res:
                line += f"  ratio {res['kiln']['samples_per_second'][b] / res['torch']['samples_per_second'][b]:.2f}x"
            print(line)

    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit(),
        "command": " ".join([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:]),
        "machine": machine(),
        "device": args.device,
        "reference": f"PyTorch {torch_version(py)} (version, BLAS_INFO)" if py else "none",
        "threads": args.threads,
        "repeats": args.repeats,
        "epochs": args.epochs,
        "results": results,
    }
    out = args.out or os.path.join(HERE, "results", f"{args.device.replace(':', '')}-{report['date'][:10]}.json")
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    print(f"\nwritten {os.path.relpath(out, ROOT)}")


if __name__ == "__main__":
    main()
