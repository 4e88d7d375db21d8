"""One benchmark run of PyTorch on the same work as kiln_bench, printed as one
JSON object on stdout (the reference side of bench/run.py).

  torch_bench.py --workload A|B --epochs N --loop resident|dataloader|graph|compile
                 [--device cpu|cuda] [--precision fp32|tf32|bf16] [--batch N] [--warmup E]
  torch_bench.py --workload C --model A|B [--device D]
  torch_bench.py --workload W [--spec S] [--batch N] [--steps N] [--windows N] --loop resident|graph

`dataloader` is the tutorials' loop: a DataLoader over uint8 images, shuffled,
converted and scaled per batch (on a GPU with pin_memory and non_blocking
copies, as the CUDA tutorial does). `resident` keeps the whole float training
set in one tensor on the device and indexes it with a fresh permutation each
epoch. `graph` is `resident` with each full step (forward, loss, backward, SGD
update) captured once into a CUDA graph over static input tensors and
replayed (torch.cuda.graphs; the last, partial batch of an epoch runs eagerly
on the same tensors). `compile` is `resident` with the model wrapped in
torch.compile(mode="reduce-overhead"), which compiles in the warm-up epoch.

--warmup E untimed epochs (default 1) run first, so that lazy initialisation
(cuBLAS handles, autotuning, compilation, capture) stays out of the timed
epochs; each timed epoch includes its shuffle and ends with a synchronisation.
Precision: fp32 (TF32 off), tf32 (torch.backends.cuda.matmul.allow_tf32), bf16
(torch.autocast(dtype=torch.bfloat16) around forward and loss).
"""
import argparse
import gzip
import json
import os
import resource
import statistics
import struct
import time

import torch
from torch import nn

WORKLOADS = {"A": ([784, 32, 10], 128), "B": ([784, 1024, 1024, 10], 256),
             "W": ([4096, 4096, 4096, 4096, 4096, 10], 8192)}


def read_idx(path):
    """An IDX file as a uint8 tensor (no NumPy: pip's torch does not require it)."""
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
    return torch.frombuffer(bytearray(data), dtype=torch.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    find = lambda kind: next(
        os.path.join(data_dir, f"{prefix}-{kind}{ext}")
        for ext in ("", ".gz")
        if os.path.exists(os.path.join(data_dir, f"{prefix}-{kind}{ext}"))
    )
    x = read_idx(find("images-idx3-ubyte")).reshape(-1, 784).clone()
    y = read_idx(find("labels-idx1-ubyte")).long()
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


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def set_precision(args):
    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = args.precision == "tf32"
        torch.backends.cudnn.allow_tf32 = args.precision == "tf32"


def autocast(args, dev, cache_enabled=True):
    return torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=args.precision == "bf16",
                          cache_enabled=cache_enabled)


def accuracy(model, x, y, args, dev):
    with torch.no_grad(), autocast(args, dev):
        return (model(x.to(dev).float() / 255.0).argmax(1) == y.to(dev)).float().mean().item()


class Stepper:
    """One SGD step on a batch: eager, or replaying a captured CUDA graph."""

    def __init__(self, model, args, dev, batch, features, graph):
        self.model, self.args, self.dev = model, args, dev
        self.opt = torch.optim.SGD(model.parameters(), lr=0.1)
        self.loss_fn = nn.CrossEntropyLoss()
        self.batch, self.graph = batch, None
        if graph:
            self.capture(features)

    def eager(self, xb, yb):
        self.opt.zero_grad(set_to_none=self.graph is None)
        with autocast(self.args, self.dev, cache_enabled=self.graph is None):
            loss = self.loss_fn(self.model(xb), yb)
        loss.backward()
        self.opt.step()
        return loss

    def capture(self, features):
        # PyTorch's recipe for whole-network capture: warm up on a side stream,
        # then capture forward, backward and step over static tensors. The
        # warm-up steps' updates are undone so every side trains the same steps.
        self.sx = torch.zeros(self.batch, features, device=self.dev)
        self.sy = torch.zeros(self.batch, dtype=torch.long, device=self.dev)
        saved = [p.detach().clone() for p in self.model.parameters()]
        s = torch.cuda.Stream(self.dev)
        s.wait_stream(torch.cuda.current_stream(self.dev))
        with torch.cuda.stream(s):
            for _ in range(3):
                self.opt.zero_grad(set_to_none=True)
                with autocast(self.args, self.dev, cache_enabled=False):
                    loss = self.loss_fn(self.model(self.sx), self.sy)
                loss.backward()
                self.opt.step()
        torch.cuda.current_stream(self.dev).wait_stream(s)
        with torch.no_grad():
            for p, q in zip(self.model.parameters(), saved):
                p.copy_(q)
        self.graph = torch.cuda.CUDAGraph()
        self.opt.zero_grad(set_to_none=True)
        with torch.cuda.graph(self.graph):
            with autocast(self.args, self.dev, cache_enabled=False):
                self.sloss = self.loss_fn(self.model(self.sx), self.sy)
            self.sloss.backward()
            self.opt.step()

    def __call__(self, xb, yb):
        if self.graph is None or len(xb) != self.batch:
            return self.eager(xb, yb)
        self.sx.copy_(xb, non_blocking=True)
        self.sy.copy_(yb, non_blocking=True)
        self.graph.replay()
        return self.sloss


def train(args, dev):
    sizes, batch = WORKLOADS[args.workload]
    batch = args.batch or batch
    xtr, ytr = load(args.data, "train")
    xte, yte = load(args.data, "test")
    model = mlp(sizes).to(dev)
    if args.loop == "compile":
        model_run = torch.compile(model, mode="reduce-overhead", dynamic=False)
    else:
        model_run = model
    step = Stepper(model_run, args, dev, batch, sizes[0], graph=args.loop == "graph")
    if args.loop == "dataloader":
        loader = torch.utils.data.DataLoader(
            torch.utils.data.TensorDataset(xtr, ytr), batch_size=batch, shuffle=True,
            pin_memory=dev.type == "cuda")
    else:
        xf, yd = xtr.to(dev).float() / 255.0, ytr.to(dev)
    seconds, cpu_seconds = [], []
    for e in range(args.warmup + args.epochs):
        sync(dev)
        t0, c0 = time.perf_counter(), time.process_time()
        if args.loop == "dataloader":
            batches = ((xb.to(dev, non_blocking=True).float() / 255.0, yb.to(dev, non_blocking=True))
                       for xb, yb in loader)
        else:
            perm = torch.randperm(len(xf), device=dev)
            batches = ((xf[perm[i : i + batch]], yd[perm[i : i + batch]]) for i in range(0, len(xf), batch))
        for xb, yb in batches:
            step(xb, yb)
        sync(dev)
        if e >= args.warmup:
            seconds.append(time.perf_counter() - t0)
            cpu_seconds.append(time.process_time() - c0)
    med = statistics.median(seconds)
    out = {
        "impl": f"torch-{args.loop}",
        "workload": args.workload,
        "precision": args.precision,
        "batch": batch,
        "warmup_epochs": args.warmup,
        "epochs": args.epochs,
        "epoch_seconds": seconds,
        "median_epoch_seconds": med,
        # CPU time of every thread of the process: with one thread, the
        # work's cost even when a busy machine delays it.
        "epoch_cpu_seconds": cpu_seconds,
        "median_epoch_cpu_seconds": statistics.median(cpu_seconds),
        "samples_per_second": len(xtr) / med,
        "test_accuracy": accuracy(model, xte, yte, args, dev),
        "peak_rss_mib": peak_rss_mib(),
    }
    if dev.type == "cuda":
        out["peak_gpu_mib"] = torch.cuda.max_memory_allocated(dev) / 2**20
    return out


def steps(args, dev):
    """Training steps of W on one synthetic batch already on the device."""
    sizes = [int(s) for s in args.spec.split("-")] if args.spec else WORKLOADS["W"][0]
    batch = args.batch or WORKLOADS["W"][1]
    model = mlp(sizes).to(dev)
    x = torch.randn(batch, sizes[0], device=dev)
    y = torch.randint(0, sizes[-1], (batch,), device=dev)
    step = Stepper(model, args, dev, batch, sizes[0], graph=args.loop == "graph")
    for _ in range(5):
        step(x, y)
    sync(dev)
    per_step = []
    for _ in range(args.windows):
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step(x, y)
        sync(dev)
        per_step.append((time.perf_counter() - t0) / args.steps)
    med = statistics.median(per_step)
    return {"impl": f"torch-{args.loop}", "workload": "W", "spec": "-".join(map(str, sizes)),
            "precision": args.precision, "batch": batch,
            "parameters": sum(p.numel() for p in model.parameters()), "steps_per_window": args.steps,
            "step_seconds": per_step, "median_step_seconds": med, "samples_per_second": batch / med,
            "final_loss": step(x, y).item(), "peak_rss_mib": peak_rss_mib()}


def infer(args, dev):
    sizes, _ = WORKLOADS[args.model]
    xte, _ = load(args.data, "test")
    x = xte.to(dev).float() / 255.0
    model = mlp(sizes).to(dev).eval()
    rates, latency = {}, {}
    with torch.no_grad():
        for b in (1, 64, 4096):
            for _ in range(3):
                model(x[:b])
            sync(dev)
            samples = 2000 if b == 1 else len(x)
            done, start, t0 = 0, 0, time.perf_counter()
            while done < samples:
                model(x[start : start + b])
                done += b
                start = start + b if start + 2 * b <= len(x) else 0
            sync(dev)
            rates[str(b)] = done / (time.perf_counter() - t0)
            lat = []
            for _ in range(21 if b == 4096 else 101):
                t1 = time.perf_counter()
                model(x[:b])
                sync(dev)
                lat.append(time.perf_counter() - t1)
            latency[str(b)] = statistics.median(lat)
    return {"impl": "torch", "workload": "C", "model": args.model, "samples_per_second": rates,
            "latency_seconds": latency, "peak_rss_mib": peak_rss_mib()}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workload", choices=["A", "B", "C", "W"], required=True)
    p.add_argument("--model", choices=["A", "B"], default="A")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--batch", type=int, default=0)
    p.add_argument("--spec", default=None)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--windows", type=int, default=7)
    p.add_argument("--loop", choices=["dataloader", "resident", "graph", "compile"], default="resident")
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    dev = torch.device(args.device)
    if dev.type != "cuda" and args.loop in ("graph", "compile"):
        p.error(f"--loop {args.loop} needs a CUDA device")
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    set_precision(args)
    if args.workload == "C":
        out = infer(args, dev)
    elif args.workload == "W":
        out = steps(args, dev)
    else:
        out = train(args, dev)
    out["torch_version"] = torch.__version__
    print(json.dumps(out))


if __name__ == "__main__":
    main()
