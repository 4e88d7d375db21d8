#!/usr/bin/env python3
"""An independent safetensors reader (standard library only) checking files
kiln wrote. Usage: safetensors_reader.py WRITER_PROGRAM. Runs the writer
(tests/safetensors_writer.c) into a temporary directory, then parses each file
with struct + json and checks names, dtypes, shapes, layout and values."""
import json, os, struct, subprocess, sys, tempfile

FORMATS = {"F32": ("f", 4), "F64": ("d", 8)}

def read(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    assert n % 8 == 0, f"header length {n} is not a multiple of 8"
    header = json.loads(data[8:8 + n].decode("utf-8"))
    body = data[8 + n:]
    meta = header.pop("__metadata__", {})
    tensors, end = {}, 0
    for name, info in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"]):
        begin, stop = info["data_offsets"]
        assert begin == end, f"{name}: begins at {begin}, previous tensor ended at {end}"
        code, size = FORMATS[info["dtype"]]
        count = 1
        for d in info["shape"]:
            count *= d
        assert stop - begin == count * size, f"{name}: {stop - begin} bytes for shape {info['shape']}"
        tensors[name] = (info["dtype"], info["shape"], struct.unpack(f"<{count}{code}", body[begin:stop]))
        end = stop
    assert end == len(body), f"tensors cover {end} bytes of a {len(body)}-byte data section"
    return meta, tensors

def check(path, spec, dtype, shapes):
    meta, tensors = read(path)
    assert meta.get("format") == "kiln-model" and meta.get("kiln.spec") == spec, meta
    # Data laid out in the order given: the model's parameter order.
    assert list(tensors) == [name for name, _ in shapes], list(tensors)
    for i, (name, shape) in enumerate(shapes):
        got_dtype, got_shape, values = tensors[name]
        assert (got_dtype, got_shape) == (dtype, shape), (name, got_dtype, got_shape)
        want = [(i + 1) * 0.25 + j * 0.5 - 1.0 for j in range(len(values))]
        assert list(values) == want, (name, values[:4], want[:4])

with tempfile.TemporaryDirectory() as tmp:
    subprocess.run([sys.argv[1], tmp], check=True)
    check(os.path.join(tmp, "f32.safetensors"), "3-4-2", "F32",
          [("0.weight", [4, 3]), ("0.bias", [4]), ("2.weight", [2, 4]), ("2.bias", [2])])
    check(os.path.join(tmp, "f64.safetensors"), "2-3", "F64", [("0.weight", [3, 2]), ("0.bias", [3])])
    print("kiln-written safetensors files read back correctly")
