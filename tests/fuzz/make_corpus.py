#!/usr/bin/env python3
"""Writes the fuzz seed corpora tests/fuzz/corpus_safetensors/ and
tests/fuzz/corpus_idx/: a handful of tiny valid files (and near-valid ones
that reach deeper checks), byte-for-byte reproducible. Run it from anywhere;
it needs only the Python standard library."""
import gzip
import json
import pathlib
import struct

HERE = pathlib.Path(__file__).resolve().parent


def safetensors(tensors, metadata=None):
    """tensors: list of (name, dtype, shape, raw bytes), written in order."""
    header, blobs, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def mlp(sizes, fmt, dtype_name):
    """The parameters of Linear layers sizes[0]-...-sizes[-1] with an
    activation between them (nn.Sequential names 0, 2, 4, ...)."""
    tensors, value = [], 0
    for layer, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
        for suffix, shape in (("weight", [n_out, n_in]), ("bias", [n_out])):
            count = shape[0] * (shape[1] if len(shape) > 1 else 1)
            values = [((value + i) % 17 - 8) / 16 for i in range(count)]
            value += count
            tensors.append((f"{2 * layer}.{suffix}", dtype_name, shape, struct.pack(f"<{count}{fmt}", *values)))
    return tensors


def kiln_model(spec, sizes, fmt="f", dtype_name="F32"):
    meta = {"format": "kiln-model", "kiln.spec": spec, "kiln.version": "0.1.0"}
    return safetensors(mlp(sizes, fmt, dtype_name), meta)


def idx(type_code, fmt, dims, values):
    return bytes([0, 0, type_code, len(dims)]) + struct.pack(f">{len(dims)}I", *dims) + \
        struct.pack(f">{len(values)}{fmt}", *values)


def write(directory, files):
    out = HERE / directory
    out.mkdir(exist_ok=True)
    for name, data in files.items():
        (out / name).write_bytes(data)


write("corpus_safetensors", {
    # Loads, and its weights fit the harness's 4-3-2 model.
    "model_4-3-2_f32.safetensors": kiln_model("4-3-2", [4, 3, 2]),
    "model_4-3-2_f64.safetensors": kiln_model("4-3-2", [4, 3, 2], "d", "F64"),
    "model_2-3-2-1_tanh.safetensors": kiln_model("2-3-2-1:tanh", [2, 3, 2, 1]),
    # Plain safetensors without kiln's metadata: weights only.
    "weights_4-3-2_no_metadata.safetensors": safetensors(mlp([4, 3, 2], "f", "F32")),
    "mixed_dtypes.safetensors": safetensors(
        [("a", "U8", [3], b"\x01\x02\x03"), ("b", "I64", [1], struct.pack("<q", -1)),
         ("c", "F16", [2], b"\x00\x3c\x00\xc0"), ("d", "BF16", [0], b"")], {"note": "not a model"}),
})

labels = [3, 1, 4, 1, 5]
images = list(range(5 * 2 * 2))
write("corpus_idx", {
    "labels_u8.idx1": idx(0x08, "B", [5], labels),
    "labels_i32.idx1": idx(0x0C, "i", [5], labels),
    "labels_u8.idx1.gz": gzip.compress(idx(0x08, "B", [5], labels), mtime=0),
    "images_u8.idx3": idx(0x08, "B", [5, 2, 2], images),
    "images_f32.idx3": idx(0x0D, "f", [5, 2, 2], [v / 20 for v in images]),
    "images_f64.idx2": idx(0x0E, "d", [5, 4], [v / 20 for v in images]),
    "images_i16.idx3.gz": gzip.compress(idx(0x0B, "h", [5, 2, 2], [v - 10 for v in images]), mtime=0),
})
