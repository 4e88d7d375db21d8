#!/usr/bin/env python3
"""A model, not a measurement: allreduce time per step against compute time
for data parallel training of kiln's workloads on H100s, and the smallest
per-GPU batch that keeps >= 90% scaling efficiency. docs/scaling.md explains
the assumptions and prints this script's tables; every number is a parameter
below, so the tables can be recomputed for another machine once nccl-tests
(all_reduce_perf) and a one-GPU step time have been measured on it.

    bench/scaling_model.py            prints the markdown tables of docs/scaling.md
"""
import math

# ---- workloads -------------------------------------------------------------
# Layer widths; every Linear has a bias. dtype: the compute precision;
# grad_bytes: bytes per gradient element allreduced (kiln reduces its f32
# gradient buffer, also under bf16 mixed precision).
WORKLOADS = {
    "A": dict(sizes=[784, 32, 10], precision="fp32", grad_bytes=4, batch=128),
    "B": dict(sizes=[784, 1024, 1024, 10], precision="fp32", grad_bytes=4, batch=256),
    "W": dict(sizes=[4096] * 5, precision="bf16", grad_bytes=4, batch=8192),
}

# ---- one H100 SXM (compute) --------------------------------------------------
# Effective dense throughput of a training step's GEMMs (fraction of the
# 67 TFLOPS fp32 / 989 TFLOPS bf16 peaks that GEMMs of these shapes reach);
# A's 32-wide layers are far from peak, which only makes A's case worse.
EFFECTIVE_FLOPS = {("A", "fp32"): 20e12, ("B", "fp32"): 50e12, ("B", "bf16"): 450e12, ("W", "bf16"): 650e12}
STEP_FLOOR = 30e-6  # launches, loss, optimizer of a small model: a captured step's floor
HBM = 3.0e12  # bytes/s the optimizer streams at
SGD_BYTES_PER_PARAM = 12  # read param and grad, write param (f32)

# ---- interconnects ------------------------------------------------------------
# Allreduce of S bytes over n GPUs: t = alpha + 2 (n - 1) / n * S / busbw
# (the ring's volume; nccl-tests' "bus bandwidth" is defined by it).
NVLINK_BUSBW = (370e9, 480e9)  # 8 x H100 over NVLink/NVSwitch, large messages
NVLINK_ALPHA = 25e-6  # small-message allreduce latency inside one machine
# Across machines: 8 x 400 Gb/s InfiniBand NDR per machine (one NIC per GPU),
# NCCL's rings one per rail: busbw ~ 8 x 50 GB/s x 0.9.
IB_BUSBW = 360e9
IB_ALPHA_PER_LEVEL = 16e-6  # latency added per doubling of machines (NCCL's trees)
GPUS_PER_MACHINE = 8


def layers(sizes):
    return [(a, b) for a, b in zip(sizes, sizes[1:])]


def params(sizes):
    return sum(a * b + b for a, b in layers(sizes))


def compute_time(w, name, batch):
    """Forward + backward + update of one step on one GPU: 6 flops per
    parameter and sample (the first layer skips dx: 4)."""
    flops = 0
    for i, (a, b) in enumerate(layers(w["sizes"])):
        flops += (6 if i > 0 else 4) * a * b * batch
    rate = EFFECTIVE_FLOPS[(name, w["precision"])]
    return STEP_FLOOR + flops / rate + params(w["sizes"]) * SGD_BYTES_PER_PARAM / HBM


def allreduce_time(nbytes, machines, nvlink_busbw):
    gpus = machines * GPUS_PER_MACHINE
    if machines == 1:
        return NVLINK_ALPHA + 2 * (gpus - 1) / gpus * nbytes / nvlink_busbw
    alpha = NVLINK_ALPHA + IB_ALPHA_PER_LEVEL * math.log2(machines)
    return alpha + 2 * (gpus - 1) / gpus * nbytes / IB_BUSBW


def step_time(w, name, batch, machines, busbw, overlap):
    """One data parallel step. Without overlap (kiln today): compute, then one
    allreduce of the flat gradient buffer, then the update. With overlap: one
    bucket per layer, each allreduced on its own stream as soon as the
    backward pass has produced it (last layer first), one after another; the
    update waits for the last."""
    sizes = layers(w["sizes"])
    grad_bytes = [(a * b + b) * w["grad_bytes"] for a, b in sizes]
    update = params(w["sizes"]) * SGD_BYTES_PER_PARAM / HBM
    backward_end = compute_time(w, name, batch) - update
    if not overlap:
        return backward_end + allreduce_time(sum(grad_bytes), machines, busbw) + update
    # Backward GEMMs: 4 of a layer's 6 flops per parameter (dW, dx); the
    # first layer's 2 of 4 (no dx).
    rate = EFFECTIVE_FLOPS[(name, w["precision"])]
    backward = [(4 if i > 0 else 2) * a * b * batch / rate for i, (a, b) in enumerate(sizes)]
    t = backward_end - sum(backward)
    comm_end = 0.0
    for i in reversed(range(len(sizes))):
        t += backward[i]
        comm_end = max(comm_end, t) + allreduce_time(grad_bytes[i], machines, busbw)
    return max(backward_end, comm_end) + update


def efficiency(w, name, batch, machines, busbw, overlap):
    return compute_time(w, name, batch) / step_time(w, name, batch, machines, busbw, overlap)


def smallest_batch(w, name, machines, busbw, overlap, target=0.9):
    """The smallest per-GPU batch with efficiency >= target (efficiency grows
    with the batch: compute grows, the allreduce does not)."""
    hi = 1
    while efficiency(w, name, hi, machines, busbw, overlap) < target:
        hi *= 2
        if hi > 1 << 24:
            return None
    lo = hi // 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if efficiency(w, name, mid, machines, busbw, overlap) >= target:
            hi = mid
        else:
            lo = mid
    return hi


def fmt_batch(b):
    return "never (< 90%)" if b is None else f"{b:,}"


def main():
    print("| workload | params | gradient MB | compute at its batch | allreduce, 8 GPUs (370-480 GB/s) |"
          " allreduce, 2 / 8 / 64 machines | efficiency at its batch, 8 GPUs, no overlap |")
    print("|---|---|---|---|---|---|---|")
    for name, w in WORKLOADS.items():
        p = params(w["sizes"])
        s = p * w["grad_bytes"]
        t_c = compute_time(w, name, w["batch"])
        lo, hi = (allreduce_time(s, 1, bw) for bw in NVLINK_BUSBW[::-1])
        multi = " / ".join(f"{allreduce_time(s, m, None) * 1e3:.2f}" for m in (2, 8, 64))
        eff = [efficiency(w, name, w["batch"], 1, bw, False) for bw in NVLINK_BUSBW]
        print(f"| {name} ({'-'.join(map(str, w['sizes']))}, batch {w['batch']}, {w['precision']}) | {p:,} |"
              f" {s / 1e6:.2f} | {t_c * 1e3:.3f} ms | {lo * 1e3:.3f}-{hi * 1e3:.3f} ms | {multi} ms |"
              f" {min(eff):.0%}-{max(eff):.0%} |")
    print()
    print("Smallest per-GPU batch for >= 90% scaling efficiency:")
    print()
    header = ["workload", "kiln today: one allreduce after backward", "with per-layer buckets overlapped",
              "overlapped, gradients reduced in bf16"]
    configs = [("8 GPUs, NVLink 370 GB/s", 1, NVLINK_BUSBW[0]), ("8 GPUs, NVLink 480 GB/s", 1, NVLINK_BUSBW[1])]
    configs += [(f"{m} machines ({m * 8} GPUs), IB", m, None) for m in (2, 4, 8, 16, 32, 64)]
    print("| workload | network | " + " | ".join(header[1:]) + " |")
    print("|---|---|---|---|---|")
    for name, w in WORKLOADS.items():
        half = dict(w, grad_bytes=2)
        for label, machines, bw in configs:
            plain = smallest_batch(w, name, machines, bw, False)
            overlapped = smallest_batch(w, name, machines, bw, True)
            compressed = smallest_batch(half, name, machines, bw, True)
            print(f"| {name} | {label} | {fmt_batch(plain)} | {fmt_batch(overlapped)} | {fmt_batch(compressed)} |")


if __name__ == "__main__":
    main()
