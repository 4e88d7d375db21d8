"""Writes the torch.save fixtures of tests/torch_fixtures/, so that CI tests
kiln's torch.save reader (src/io/torch_file.cpp) without PyTorch.

    /work/venv/bin/python tests/torch_fixtures/make_torch_fixtures.py

Needs PyTorch 2.6 or later (it has been run with 2.15). Run it again after changing it; the files are then
committed. torch.save stamps each file with a random serialization id, so
the bytes change from run to run but not what the tests read.

Values. Tensor k of a 4-3-2 MLP (0.weight [3, 4], 0.bias [3], 2.weight
[2, 3], 2.bias [2], in that order; k counts from 0) holds, at its row-major
position i, value(k, i) = (k + 1) * 0.1 * ((i % 7) - 3) rounded to the
file's dtype: tests/test_torch_file.c and tests/torch_file_test.cpp compute
the same closed form. dtypes.pt's tensors hold arange values (below).

Written by PyTorch itself (torch.save):
  mlp.pt                nn.Sequential(Linear(4, 3), ReLU(), Linear(3, 2)).state_dict()
  mlp_f64.pt            the same in float64
  mlp_flatten.pt        Sequential(Flatten(), Linear(4, 3), ReLU(), Dropout(), Linear(3, 2)):
                        names 1.* and 4.*
  mlp_parameters_p5.pt  state_dict(keep_vars=True) (nn.Parameter: _rebuild_parameter)
                        pickled with protocol 5 (FRAME, MEMOIZE, STACK_GLOBAL)
  mlp_shared.pt         all four tensors are views of one 40-element storage, at
                        offsets 0, 12, 16 and 24; 2.weight is a transposed view
                        (stride (1, 2)), as the flat parameter buffers of some
                        optimizers and kiln itself keep them
  mlp_no_byteorder.pt   mlp.pt without the byteorder record (as older releases wrote it)
  mlp_protocol1.pt      pickle_protocol=1: its requires_grad as INT "00" (torch.load reads it
                        with weights_only=False)
  mlp_protocol0.pt      pickle_protocol=0: text persistent ids, which torch.load cannot read
                        (kiln refuses it saying so)
  mlp_no_crc32.pt       mlp.pt saved with torch.utils.serialization.config.save.compute_crc32
                        = False (PyTorch 2.6 and later): every record's CRC-32 is 0
  dtypes.pt             f32 f64 f16 bf16 i32 i64: (arange(6) - 2).reshape(2, 3);
                        u8: arange(6) * 40 + 3; f16_t: f16's transpose (a view,
                        stride (1, 3)); i64_tail: i64.flatten()[3:] (offset 3);
                        expanded: arange(3.).expand(2, 3) (stride (0, 1));
                        scalar: tensor(2.5) (0-d); empty: zeros(0, 3)
  batchnorm.pt          Sequential(Linear(4, 3), BatchNorm1d(3), ReLU(), Linear(3, 2))
  tutorial.pt           PyTorch's quickstart model: a Flatten and a Sequential named
                        linear_relu_stack (Linear(4, 8), ReLU, Linear(8, 8), ReLU,
                        Linear(8, 2)): names linear_relu_stack.0.weight, ...
  checkpoint.pt         {"epoch": 3, "model_state_dict": mlp, "optimizer_state_dict": ...}
  whole_model.pt        torch.save(model): a pickled nn.Sequential
  bool.pt               {"mask": a bool tensor}
  legacy.pt             mlp with _use_new_zipfile_serialization=False
  custom_names.pt       mlp's Linears as a module's attributes fc1 and fc2
  module_list.pt        mlp's Linears in an nn.ModuleList: layers.0.*, layers.1.*
  exported.pt2          torch.export.save of mlp: a torch.export archive, not a torch.save file
  weight_norm.pt        mlp with torch.nn.utils.parametrizations.weight_norm on 0: names
                        0.bias, 0.parametrizations.weight.original0 and original1
  weight_norm_g_v.pt    the same by the older torch.nn.utils.weight_norm: 0.weight_g, 0.weight_v
  pruned.pt             mlp with torch.nn.utils.prune.l1_unstructured on 0.weight: names
                        0.weight_orig and 0.weight_mask
  weight_saved_once.pt  mlp's state_dict without 2.weight, as safetensors' save_model
                        writes a weight tied to another layer's (once, under the other name)

Derived from those, by this script, each checked to load in PyTorch with the
same tensors as its source (torch.load), so each is a file PyTorch reads:
  mlp_big_endian.pt     mlp_shared.pt with byteorder "big" and every storage's
                        elements byte-swapped: what torch.save writes on a
                        big-endian machine (PyTorch swaps them back on load)
  dtypes_big_endian.pt  dtypes.pt likewise (2-, 4- and 8-byte elements)
  mlp_deflated.pt       mlp.pt repacked with every record deflated (method 8)
  mlp_zip64.pt          mlp.pt repacked with zip64 extra fields for every size and
                        offset, as a writer does for records beyond 4 GiB
  mlp_bzip2.pt          mlp.pt repacked by Python's zipfile with bzip2 (method 12),
                        which neither PyTorch nor kiln reads (refused by method)

Hostile or broken (never loaded in PyTorch: kiln must refuse them by reading
only): mlp.pt's records with data.pkl replaced by
  hostile_posix_system.pt  pickle.dumps of an object reducing to os.system
                           ("posix system" in the pickle) with "exit 0"
  hostile_os_system.pt     GLOBAL "os system" REDUCE, assembled by hand
  hostile_eval.pt          builtins.eval through STACK_GLOBAL (protocol 4)
  hostile_in_state_dict.pt a state_dict whose first tensor is fine and whose
                           second value reduces to posix.system
  hostile_newobj.pt        NEWOBJ of collections.OrderedDict
  hostile_int_text.pt      a text INT (protocol 0 and 1) of 19 digits, past int64's reach
  hostile_storage_key.pt   a storage key "../../../etc/passwd"
  hostile_view.pt          a view reaching past its storage (size 13 of 12)
  hostile_storage_size.pt  a storage whose numel does not match its record
"""
import collections
import os
import pickle
import struct
import sys
import zipfile
import zlib

import torch
import torch.nn.utils.prune
import torch.utils.serialization
from torch import nn

HERE = os.path.dirname(os.path.abspath(__file__))
STORAGE_ITEMSIZE = {"FloatStorage": 4, "DoubleStorage": 8, "HalfStorage": 2, "BFloat16Storage": 2,
                    "IntStorage": 4, "LongStorage": 8, "ByteStorage": 1, "BoolStorage": 1}


def path(name):
    return os.path.join(HERE, name)


def value(k, i):
    return (k + 1) * 0.1 * ((i % 7) - 3)


def pattern(k, shape, dtype):
    n = 1
    for s in shape:
        n *= s
    return torch.tensor([value(k, i) for i in range(n)], dtype=torch.float64).reshape(shape).to(dtype)


def set_mlp(linears, dtype=torch.float32):
    """Sets the Linears' weights and biases to the value() pattern."""
    k = 0
    with torch.no_grad():
        for lin in linears:
            for p in (lin.weight, lin.bias):
                p.copy_(pattern(k, tuple(p.shape), dtype))
                k += 1


class CustomNames(nn.Module):
    """The mlp's Linears as attributes fc1 and fc2, as most hand-written models name them."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 3), nn.Linear(3, 2)
        set_mlp([self.fc1, self.fc2])

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class LayerList(nn.Module):
    """The mlp's Linears in an nn.ModuleList: layers.0 and layers.1."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 3), nn.Linear(3, 2)])
        set_mlp(list(self.layers))

    def forward(self, x):
        return self.layers[1](torch.relu(self.layers[0](x)))


def with_weight_norm(model):
    torch.nn.utils.parametrizations.weight_norm(model[0])
    return model


def mlp(dtype=torch.float32):
    m = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)).to(dtype)
    set_mlp([m[0], m[2]], dtype)
    return m


# ---- zip records -------------------------------------------------------------------------
def records(name):
    with zipfile.ZipFile(path(name)) as z:
        return [(i.filename, z.read(i.filename)) for i in z.infolist()]


def write_zip(name, recs, method=zipfile.ZIP_STORED, zip64=False):
    """A zip of recs [(name, bytes)], written by hand so that the zip64 form
    (every size and offset in a zip64 extra field, APPNOTE 4.5.3) can be
    made for small records too."""
    out = bytearray()
    central = bytearray()
    for rec_name, data in recs:
        raw_name = rec_name.encode()
        crc = zlib.crc32(data)
        if method == zipfile.ZIP_DEFLATED:
            c = zlib.compressobj(9, zlib.DEFLATED, -15)
            body = c.compress(data) + c.flush()
        else:
            body = data
        offset = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0, crc, len(body), len(data),
                           len(raw_name), 0) + raw_name + body
        if zip64:
            extra = struct.pack("<HHQQQ", 1, 24, len(data), len(body), offset)
            sizes = (0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF)
        else:
            extra = b""
            sizes = (len(body), len(data), offset)
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, method, 0, 0, crc, sizes[0],
                               sizes[1], len(raw_name), len(extra), 0, 0, 0, 0, sizes[2]) + raw_name + extra
    cd_offset = len(out)
    out += central
    z64_offset = len(out)
    count = len(recs)
    out += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, count, count, len(central), cd_offset)
    out += struct.pack("<IIQI", 0x07064B50, 0, z64_offset, 1)
    if zip64:
        out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    else:
        out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, len(central), cd_offset, 0)
    with open(path(name), "wb") as f:
        f.write(out)


def storage_types(pkl):
    """{storage key: storage type name} of a torch.save data.pkl, read
    without building any tensor."""
    types = {}

    class Peek(pickle.Unpickler):
        def find_class(self, module, name):
            if module == "collections" and name == "OrderedDict":
                return collections.OrderedDict
            if module == "torch" and name.endswith("Storage"):
                return name
            if module == "torch._utils":
                return lambda *args: None
            raise pickle.UnpicklingError("unexpected global %s.%s" % (module, name))

        def persistent_load(self, pid):
            types[pid[2]] = pid[1]

    Peek(__import__("io").BytesIO(pkl)).load()
    return types


def big_endian(source, name):
    recs = records(source)
    prefix = next(n for n, _ in recs if n.endswith("/data.pkl"))[: -len("data.pkl")]
    types = storage_types(dict(recs)[prefix + "data.pkl"])
    out = []
    for rec_name, data in recs:
        if rec_name == prefix + "byteorder":
            data = b"big"
        elif rec_name.startswith(prefix + "data/"):
            size = STORAGE_ITEMSIZE[types[rec_name[len(prefix + "data/"):]]]
            data = b"".join(data[i:i + size][::-1] for i in range(0, len(data), size))
        out.append((rec_name, data))
    write_zip(name, out)


def same_as(name, source):
    a, b = torch.load(path(name)), torch.load(path(source))
    assert list(a) == list(b), name
    for key in a:
        assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), (name, key)
        assert a[key].stride() == b[key].stride(), (name, key)


def with_pickle(name, pkl):
    recs = [(n, pkl if n.endswith("/data.pkl") else d) for n, d in records("mlp.pt")]
    write_zip(name, recs)


# ---- a small pickle assembler for the hostile files ------------------------------------
def s(text):
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def i(v):
    return b"J" + struct.pack("<i", v)


def glob(module, name):
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def tensor(key, numel, offset, size, stride, storage="FloatStorage"):
    tup = lambda items: b"(" + b"".join(items) + b"t"
    return (glob("torch._utils", "_rebuild_tensor_v2") + b"(" +
            b"(" + s("storage") + glob("torch", storage) + s(key) + s("cpu") + i(numel) + b"t" + b"Q" +
            i(offset) + tup([i(x) for x in size]) + tup([i(x) for x in stride]) + b"\x89" +
            glob("collections", "OrderedDict") + b")R" + b"tR")


def state_dict(items):
    return (b"\x80\x02" + glob("collections", "OrderedDict") + b")R(" +
            b"".join(s(n) + t for n, t in items) + b"u.")


class Reduce:
    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return (self.fn, self.args)


def main():
    torch.manual_seed(0)
    torch.save(mlp().state_dict(), path("mlp.pt"))
    torch.save(mlp(torch.float64).state_dict(), path("mlp_f64.pt"))
    flat = nn.Sequential(nn.Flatten(), nn.Linear(4, 3), nn.ReLU(), nn.Dropout(), nn.Linear(3, 2))
    set_mlp([flat[1], flat[4]])
    torch.save(flat.state_dict(), path("mlp_flatten.pt"))
    torch.save(mlp().state_dict(keep_vars=True), path("mlp_parameters_p5.pt"), pickle_protocol=5)
    torch.save(mlp().state_dict(), path("mlp_no_byteorder.pt"), _disable_byteorder_record=True)
    torch.save(mlp().state_dict(), path("mlp_protocol1.pt"), pickle_protocol=1)
    torch.save(mlp().state_dict(), path("mlp_protocol0.pt"), pickle_protocol=0)
    save_config = torch.utils.serialization.config.save
    save_config.compute_crc32 = False
    try:
        torch.save(mlp().state_dict(), path("mlp_no_crc32.pt"))
    finally:
        save_config.compute_crc32 = True

    buf = torch.zeros(40)
    shared = collections.OrderedDict()
    shared["0.weight"] = buf[0:12].view(3, 4)
    shared["0.bias"] = buf[12:15]
    shared["2.weight"] = buf[16:22].view(3, 2).t()
    shared["2.bias"] = buf[24:26]
    for k, t in enumerate(shared.values()):
        t.copy_(pattern(k, tuple(t.shape), torch.float32))
    assert shared["2.weight"].stride() == (1, 2)
    torch.save(shared, path("mlp_shared.pt"))

    d = collections.OrderedDict()
    base = (torch.arange(6, dtype=torch.float64) - 2).reshape(2, 3)
    for key, dtype in [("f32", torch.float32), ("f64", torch.float64), ("f16", torch.float16),
                       ("bf16", torch.bfloat16), ("i32", torch.int32), ("i64", torch.int64)]:
        d[key] = base.to(dtype)
    d["u8"] = (torch.arange(6) * 40 + 3).to(torch.uint8).reshape(2, 3)
    d["f16_t"] = d["f16"].t()
    d["i64_tail"] = d["i64"].flatten()[3:]
    d["expanded"] = torch.arange(3.0).expand(2, 3)
    d["scalar"] = torch.tensor(2.5)
    d["empty"] = torch.zeros(0, 3)
    assert d["i64_tail"].storage_offset() == 3 and d["expanded"].stride() == (0, 1)
    torch.save(d, path("dtypes.pt"))

    bn = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.ReLU(), nn.Linear(3, 2))
    torch.save(bn.state_dict(), path("batchnorm.pt"))

    class NeuralNetwork(nn.Module):
        def __init__(self):
            super().__init__()
            self.flatten = nn.Flatten()
            self.linear_relu_stack = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(),
                                                   nn.Linear(8, 2))

    torch.save(NeuralNetwork().state_dict(), path("tutorial.pt"))
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    torch.save({"epoch": 3, "model_state_dict": model.state_dict(), "optimizer_state_dict": opt.state_dict()},
               path("checkpoint.pt"))
    torch.save(mlp(), path("whole_model.pt"))
    torch.save({"mask": torch.tensor([True, False])}, path("bool.pt"))
    torch.save(mlp().state_dict(), path("legacy.pt"), _use_new_zipfile_serialization=False)
    torch.save(with_weight_norm(mlp()).state_dict(), path("weight_norm.pt"))
    torch.save(CustomNames().state_dict(), path("custom_names.pt"))
    torch.save(LayerList().state_dict(), path("module_list.pt"))
    torch.export.save(torch.export.export(mlp(), (torch.zeros(2, 4),)), path("exported.pt2"))
    old_norm = mlp()
    torch.nn.utils.weight_norm(old_norm[0])  # deprecated in 2.1, still in use
    torch.save(old_norm.state_dict(), path("weight_norm_g_v.pt"))
    pruned = mlp()
    torch.nn.utils.prune.l1_unstructured(pruned[0], "weight", amount=0.5)
    torch.save(pruned.state_dict(), path("pruned.pt"))
    tied = mlp().state_dict()
    del tied["2.weight"]
    torch.save(tied, path("weight_saved_once.pt"))

    big_endian("mlp_shared.pt", "mlp_big_endian.pt")
    same_as("mlp_big_endian.pt", "mlp_shared.pt")
    big_endian("dtypes.pt", "dtypes_big_endian.pt")
    same_as("dtypes_big_endian.pt", "dtypes.pt")
    write_zip("mlp_deflated.pt", records("mlp.pt"), method=zipfile.ZIP_DEFLATED)
    same_as("mlp_deflated.pt", "mlp.pt")
    write_zip("mlp_zip64.pt", records("mlp.pt"), zip64=True)
    same_as("mlp_zip64.pt", "mlp.pt")
    with zipfile.ZipFile(path("mlp_bzip2.pt"), "w", zipfile.ZIP_BZIP2) as z:
        for rec_name, data in records("mlp.pt"):
            z.writestr(rec_name, data)

    with_pickle("hostile_posix_system.pt", pickle.dumps(Reduce(os.system, ("exit 0",)), protocol=2))
    with_pickle("hostile_os_system.pt", b"\x80\x02" + glob("os", "system") + s("exit 0") + b"\x85R.")
    with_pickle("hostile_eval.pt", pickle.dumps(Reduce(eval, ("1 + 1",)), protocol=4))
    system = glob("posix", "system") + s("exit 0") + b"\x85R"
    with_pickle("hostile_in_state_dict.pt",
                state_dict([("0.weight", tensor("0", 12, 0, [3, 4], [4, 1])), ("0.bias", system)]))
    with_pickle("hostile_int_text.pt", b"I1234567890123456789\n.")
    with_pickle("hostile_newobj.pt", b"\x80\x02" + glob("collections", "OrderedDict") + b")\x81.")
    with_pickle("hostile_storage_key.pt", state_dict([("0.weight", tensor("../../../etc/passwd", 12, 0, [3, 4], [4, 1]))]))
    with_pickle("hostile_view.pt", state_dict([("0.weight", tensor("0", 12, 0, [13], [1]))]))
    with_pickle("hostile_storage_size.pt", state_dict([("0.weight", tensor("0", 13, 0, [3, 4], [4, 1]))]))
    print("wrote the fixtures in %s with torch %s" % (HERE, torch.__version__))


if __name__ == "__main__":
    sys.exit(main())
