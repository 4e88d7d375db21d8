"""One benchmark run of PyTorch on the same work as kiln_bench, printed as one
JSON object on stdout (the reference side of bench/run.py).

  torch_bench.py --workload A|B --epochs N --loop dataloader|resident
  torch_bench.py --workload C --model A|B

`dataloader` is the tutorials' loop: a DataLoader over uint8 images, shuffled,
converted and scaled per batch. `resident` keeps the whole float training set
in one tensor and indexes it with a fresh permutation each epoch.
"""
import argparse
import gzip
import json
import os
import resource
import statistics
import struct
import time

import numpy as np
import torch
from torch import nn

WORKLOADS = {"A": ([784, 32, 10], 128), "B": ([784, 1024, 1024, 10], 256)}


def read_idx(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    find = lambda kind: next(
        os.path.join(data_dir, f"{prefix}-{kind}{ext}")
        for ext in ("", ".gz")
        if os.path.exists(os.path.join(data_dir, f"{prefix}-{kind}{ext}"))
    )
    x = torch.from_numpy(read_idx(find("images-idx3-ubyte")).reshape(-1, 784).copy())
    y = torch.from_numpy(read_idx(find("labels-idx1-ubyte")).astype(np.int64))
    return x, y


def mlp(sizes):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def accuracy(model, x, y):
    with torch.no_grad():
        return (model(x.float() / 255.0).argmax(1) == y).float().mean().item()


def train(args):
    sizes, batch = WORKLOADS[args.workload]
    xtr, ytr = load(args.data, "train")
    xte, yte = load(args.data, "test")
    model = mlp(sizes)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    if args.loop == "dataloader":
        loader = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(xtr, ytr), batch_size=batch, shuffle=True
        )
    else:
        xf = xtr.float() / 255.0
    seconds = []
    for _ in range(args.epochs):
        t0 = time.perf_counter()
        if args.loop == "dataloader":
            batches = ((xb.float() / 255.0, yb) for xb, yb in loader)
        else:
            perm = torch.randperm(len(xf))
            batches = ((xf[perm[i : i + batch]], ytr[perm[i : i + batch]]) for i in range(0, len(xf), batch))
        for xb, yb in batches:
            opt.zero_grad(set_to_none=True)
            loss_fn(model(xb), yb).backward()
            opt.step()
        seconds.append(time.perf_counter() - t0)
    med = statistics.median(seconds)
    return {
        "impl": f"torch-{args.loop}",
        "workload": args.workload,
        "epochs": args.epochs,
        "epoch_seconds": seconds,
        "median_epoch_seconds": med,
        "samples_per_second": len(xtr) / med,
        "test_accuracy": accuracy(model, xte, yte),
        "peak_rss_mib": peak_rss_mib(),
    }


def infer(args):
    sizes, _ = WORKLOADS[args.model]
    xte, _ = load(args.data, "test")
    x = xte.float() / 255.0
    model = mlp(sizes).eval()
    rates = {}
    with torch.no_grad():
        for b in (1, 64, 4096):
            samples = 2000 if b == 1 else len(x)
            done, start, t0 = 0, 0, time.perf_counter()
            while done < samples:
                model(x[start : start + b])
                done += b
                start = start + b if start + 2 * b <= len(x) else 0
            rates[str(b)] = done / (time.perf_counter() - t0)
    return {"impl": "torch", "workload": "C", "model": args.model, "samples_per_second": rates,
            "peak_rss_mib": peak_rss_mib()}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workload", choices=["A", "B", "C"], required=True)
    p.add_argument("--model", choices=["A", "B"], default="A")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--loop", choices=["dataloader", "resident"], default="resident")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    print(json.dumps(infer(args) if args.workload == "C" else train(args)))


if __name__ == "__main__":
    main()
