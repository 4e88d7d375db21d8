"""Summarises an `ncu --csv --metrics gpu__time_duration.sum` log of a few
training steps (scripts/gpu-check.sh): kernel launches per step, GPU time per
step, and per kernel name its launches and time, longest first.

  python3 bench/ncu_summary.py NCU.csv [--steps N]
"""
import argparse
import collections
import csv
import io

UNITS = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("csv")
    p.add_argument("--steps", type=int, default=1, help="steps the profile covers")
    args = p.parse_args()
    with open(args.csv) as f:
        lines = [l for l in f if l.startswith('"')]  # drop ==PROF== and program output
    if not lines:
        raise SystemExit(f"ncu_summary: no CSV rows in {args.csv} (did any kernel run between cuProfilerStart/Stop?)")
    rows = [r for r in csv.DictReader(io.StringIO("".join(lines))) if r.get("Metric Name") == "gpu__time_duration.sum"]
    count, total = collections.Counter(), collections.Counter()
    for r in rows:
        scale = UNITS.get(r.get("Metric Unit", "ns").strip(), 1.0)
        ns = float(r["Metric Value"].replace(",", "")) * scale
        name = r["Kernel Name"]
        count[name] += 1
        total[name] += ns
    launches, time_ns = sum(count.values()), sum(total.values())
    print(f"{launches / args.steps:.1f} kernel launches per step, {time_ns / args.steps / 1e3:.1f} us of kernel time "
          f"per step (sum of kernel durations, each measured alone by ncu)")
    print(f"{'launches/step':>13} {'us/step':>9} {'us/launch':>9}  kernel")
    for name, ns in total.most_common():
        print(f"{count[name] / args.steps:13.1f} {ns / args.steps / 1e3:9.2f} {ns / count[name] / 1e3:9.2f}  {name[:140]}")


if __name__ == "__main__":
    main()
