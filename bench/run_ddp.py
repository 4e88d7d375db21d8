#!/usr/bin/env python3
"""Samples/s of data parallel training on CPU ranks: kiln_bench on 1 rank and
under `mpirun -np N`, written as one JSON file with the machine, its load
average before and after (other jobs share small CI machines) and every
run's output.

    bench/run_ddp.py --build-dir build-cpu --workload B --epochs 2 \
        --out bench/results/cpu-DATE-ddp-B.json

Configurations: 1 rank with all cores; 1 rank with 1 thread; N ranks with
1 thread each and the workload's batch per rank (weak scaling: N times the
global batch); N ranks with the batch split (strong scaling: the same global
batch as 1 rank); and with --bucket-bytes X,Y the weak-scaling run again with
gradient buckets of X, then Y bytes (kiln_trainer_options_set_bucket_bytes).
"""
import argparse
import datetime
import json
import os
import platform
import subprocess

BATCH = {"A": 128, "B": 256}


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def run(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    lines = [l for l in out.splitlines() if l.startswith("{")]
    assert len(lines) == 1, out
    return json.loads(lines[0])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build-dir", default="build-cpu")
    p.add_argument("--workload", default="B")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--device", default="cpu", help="cpu, or cuda: rank r on cuda:<local rank>")
    p.add_argument("--bucket-bytes", default="", help="comma-separated bucket sizes to compare with 0")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    bench = os.path.join(a.build_dir, "bench", "kiln_bench")
    env_path = os.path.abspath(a.build_dir)
    os.environ["KILN_BACKEND_PATH"] = env_path
    cores = os.cpu_count()
    base = [bench, "--workload", a.workload, "--epochs", str(a.epochs), "--device", a.device]
    mpi = ["mpirun", "-np", str(a.ranks), "--oversubscribe", "--allow-run-as-root"]
    b = BATCH[a.workload]
    configs = [
        (f"1 rank, {cores} threads, batch {b}", base + ["--threads", str(cores)]),
        (f"1 rank, 1 thread, batch {b}", base + ["--threads", "1"]),
        (f"{a.ranks} ranks x 1 thread, batch {b} per rank ({a.ranks * b} in all)",
         mpi + base + ["--threads", "1", "--distributed", "1", "--batch-per-rank", str(b)]),
        (f"{a.ranks} ranks x 1 thread, batch {b // a.ranks} per rank ({b} in all)",
         mpi + base + ["--threads", "1", "--distributed", "1", "--batch-per-rank", str(b // a.ranks)]),
    ]
    for size in filter(None, a.bucket_bytes.split(",")):
        configs.append((f"{a.ranks} ranks x 1 thread, batch {b} per rank, buckets of {size} bytes",
                        mpi + base + ["--threads", "1", "--distributed", "1", "--batch-per-rank", str(b),
                                      "--bucket-bytes", size]))
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True,
                                 text=True).stdout.strip(),
        "command": "bench/run_ddp.py " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(a).items()),
        "machine": {"cpu": cpu_name(), "cores": cores, "os": platform.platform()},
        "load_average_before": os.getloadavg(),
        "runs": [],
    }
    for label, cmd in configs:
        r = run(cmd)
        r["config"] = label
        r["command"] = " ".join(cmd)
        result["runs"].append(r)
        print(f"{label}: {r['samples_per_second']:.0f} samples/s, test accuracy {r['test_accuracy']:.4f}", flush=True)
    result["load_average_after"] = os.getloadavg()
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
