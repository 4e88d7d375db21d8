"""Does kiln train exactly like PyTorch? Starts both from the same weights and
feeds them the same batches (a fresh torch.randperm each epoch, as
torch_bench.py's resident loop, so with the same --seed PyTorch's side is that
run exactly), then compares the losses step by step, the weights, and the
test accuracies at the end. Separates "kiln computes something else" from
"another seed gave another accuracy".

  /usr/bin/python3 bench/torch_parity.py [--lib build/libkiln.so] [--spec 784-1024-1024-10]
                                         [--batch 256] [--epochs 1] [--steps N] [--lr 0.1] [--seed 0]
                                         [--shuffle-seed S]

kiln is called through its C API with ctypes; the starting weights go from
PyTorch to kiln as a safetensors file written here with the standard library.
"""
import argparse
import ctypes as C
import json
import os
import struct
import sys
import tempfile

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_bench import load  # noqa: E402  (the same Fashion-MNIST reader)


def save_safetensors(path, tensors, metadata):
    header, offset, blobs = {"__metadata__": metadata}, 0, []
    for name, t in tensors:
        data = t.detach().contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + b"".join(blobs))


class Kiln:
    def __init__(self, lib):
        self.lib = C.CDLL(lib)
        self.lib.kiln_last_error.restype = C.c_char_p

    def __call__(self, fn, *args):
        status = getattr(self.lib, fn)(*args)
        if status != 0:
            sys.exit(f"parity: {fn} failed ({status}): {self.lib.kiln_last_error().decode()}")


class Device(C.Structure):
    _fields_ = [("kind", C.c_int), ("index", C.c_int64)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lib", default=os.path.join(os.path.dirname(__file__), "..", "build", "libkiln.so"))
    p.add_argument("--spec", default="784-1024-1024-10")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: run every epoch)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shuffle-seed", type=int, default=None,
                   help="draw the batch orders from a torch.Generator of this seed instead of the global one "
                        "that also drew the initial weights (PyTorch's default)")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = p.parse_args()

    torch.manual_seed(args.seed)
    sizes = [int(s) for s in args.spec.split("-")]
    layers = []
    for i in range(len(sizes) - 1):
        layers += [nn.Linear(sizes[i], sizes[i + 1])] + ([nn.ReLU()] if i < len(sizes) - 2 else [])
    model = nn.Sequential(*layers)
    x, y = load(args.data, "train")
    x = x.float() / 255.0
    xte, yte = load(args.data, "test")

    k = Kiln(args.lib)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "start.safetensors")
        save_safetensors(path, list(model.state_dict().items()), {"format": "kiln-model", "kiln.spec": args.spec})
        ctx, kmodel, opts, trainer = C.c_void_p(), C.c_void_p(), C.c_void_p(), C.c_void_p()
        cpu = Device(0, -1)
        k("kiln_context_create", None, C.byref(ctx))
        k("kiln_model_load", ctx, path.encode(), cpu, C.byref(kmodel))
    k("kiln_trainer_options_create", C.byref(opts))
    k("kiln_trainer_options_set_lr", opts, C.c_double(args.lr))
    k("kiln_trainer_create", kmodel, opts, C.byref(trainer))

    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    shuffle = None if args.shuffle_seed is None else torch.Generator().manual_seed(args.shuffle_seed)

    def batches():
        for _ in range(args.epochs):
            perm = torch.randperm(len(x), generator=shuffle)
            for i in range(0, len(x), args.batch):
                yield perm[i : i + args.batch]

    worst_loss, step = 0.0, 0
    for idx in batches():
        if args.steps and step == args.steps:
            break
        xb, yb = x[idx].contiguous(), y[idx].contiguous()
        opt.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        kx, ky, kloss = C.c_void_p(), C.c_void_p(), C.c_double()
        xs, ys = (C.c_int64 * 2)(*xb.shape), (C.c_int64 * 1)(len(yb))
        k("kiln_tensor_from_host", ctx, C.c_void_p(xb.data_ptr()), C.c_int64(xb.numel() * 4), xs, C.c_int64(2), 0, cpu, C.byref(kx))
        k("kiln_tensor_from_host", ctx, C.c_void_p(yb.data_ptr()), C.c_int64(yb.numel() * 8), ys, C.c_int64(1), 5, cpu, C.byref(ky))
        k("kiln_trainer_step", trainer, kx, ky, C.byref(kloss))
        k.lib.kiln_tensor_release(kx)
        k.lib.kiln_tensor_release(ky)
        worst_loss = max(worst_loss, abs(kloss.value - loss.item()) / abs(loss.item()))
        if step % 200 == 0:
            print(f"step {step:5d}  torch loss {loss.item():.6f}  kiln loss {kloss.value:.6f}")
        step += 1

    worst_weight = 0.0
    for i, (name, t) in enumerate(model.state_dict().items()):
        kt = C.c_void_p()
        k("kiln_model_parameter", kmodel, C.c_int64(i), C.byref(kt))
        buf = torch.empty_like(t)
        k("kiln_tensor_copy_to_host", kt, C.c_void_p(buf.data_ptr()), C.c_int64(buf.numel() * 4))
        k.lib.kiln_tensor_release(kt)
        worst_weight = max(worst_weight, ((buf - t).abs().max() / t.abs().max()).item())
    with torch.no_grad():
        torch_acc = (model(xte.float() / 255.0).argmax(1) == yte).float().mean().item()
    test, kloss, kacc = C.c_void_p(), C.c_double(), C.c_double()
    k("kiln_dataset_load_mnist", ctx, args.data.encode(), b"test", C.byref(test))
    k("kiln_trainer_evaluate", trainer, test, C.byref(kloss), C.byref(kacc))
    print(f"after {step} steps of {args.spec}, batch {args.batch}, SGD lr {args.lr}, seed {args.seed}:")
    print(f"  largest relative loss difference   {worst_loss:.2e}")
    print(f"  largest weight difference / max|w| {worst_weight:.2e}")
    print(f"  test accuracy: PyTorch {100 * torch_acc:.2f}%, kiln {100 * kacc.value:.2f}%")


if __name__ == "__main__":
    main()
