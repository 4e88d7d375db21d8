#!/usr/bin/env python3
"""Writes the fuzz seed corpora tests/fuzz/corpus_NAME/, one per harness
fuzz_NAME.c: a handful of tiny valid inputs (and near-valid ones that reach
deeper checks), byte-for-byte reproducible. Run it from anywhere; it needs
only the Python standard library (corpus_torch is taken from the committed
torch.save files of tests/torch_fixtures/, which PyTorch wrote). Files named regress_* are inputs the
fuzzer found; they are kept in the corpora by hand, not written here."""
import gzip
import json
import pathlib
import struct
import zipfile

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


def checkpoint(optimizer, state_names, counters=(3, 12, 12), meta_extra=None):
    """A kiln-checkpoint of the harness's 4-3-2 model: parameters, the
    optimizer's state buffers per parameter, and the metadata
    src/train/checkpoint.cpp writes."""
    params = mlp([4, 3, 2], "f", "F32")
    tensors = list(params)
    for state in state_names:
        tensors += [(f"optimizer.{state}.{name}", dtype, shape, bytes(len(raw)))
                    for name, dtype, shape, raw in params]
    meta = {"format": "kiln-checkpoint", "kiln.version": "0.1.0", "kiln.spec": "4-3-2",
            "epochs_done": str(counters[0]), "steps_done": str(counters[1]),
            "optimizer_steps": str(counters[2]), "shuffle_seed": "42", "shuffle_counter": "7",
            "optimizer": optimizer, "lr": "0.01", "momentum": "0.90000000000000002", "nesterov": "0",
            "weight_decay": "0", "beta1": "0.90000000000000002", "beta2": "0.999", "eps": "1e-08"}
    meta.update(meta_extra or {})
    return safetensors(tensors, meta)


write("corpus_checkpoint", {
    "sgd_momentum.safetensors": checkpoint("sgd", ["momentum_buffer"]),
    "adam.safetensors": checkpoint("adam", ["exp_avg", "exp_avg_sq"]),
    # The largest counters kiln resumes (2^62), and one past them.
    "adam_counters_2p62.safetensors": checkpoint("adam", ["exp_avg", "exp_avg_sq"], (2**62,) * 3),
    "adam_counters_2p64m1.safetensors": checkpoint("adam", ["exp_avg", "exp_avg_sq"], (2**64 - 1,) * 3),
    "model_not_checkpoint.safetensors": kiln_model("4-3-2", [4, 3, 2]),
})

write("corpus_spec", {
    "mnist.txt": b"784-32-10",
    "gelu.txt": b"784-1024-1024-10:gelu",
    "dropout.txt": b"784-256-10:relu:dropout=0.2",
    "leaky.txt": b"8-4-2:leaky_relu",
    "sigmoid_tanh.txt": b"3-3:sigmoid",
    "long_form.txt": b"linear(784,32);relu;dropout(0.2);linear(32,10,nobias)",
    "long_form_small.txt": b"linear(4,3);tanh;linear(3,2,nobias);sigmoid",
    # Two parts (split at the NUL): the second is appended to the first.
    "append.txt": b"4-3\x003-2:tanh",
    "append_mismatch.txt": b"4-3\x005-2",
    "huge.txt": b"4294967296-4294967296-2",
})

write("corpus_device", {
    "cpu.txt": b"cpu", "cpu0.txt": b"cpu:0", "cuda.txt": b"cuda", "cuda0.txt": b"cuda:0",
    "cuda_max.txt": b"cuda:9223372036854775807", "cuda_over.txt": b"cuda:9223372036854775808",
    "auto.txt": b"auto", "cuda_negative.txt": b"cuda:-1", "upper.txt": b"CUDA:1", "spaces.txt": b" cuda:1 ",
})

# A spec index byte (fuzz_state_dict.c's SPECS), then the file.
write("corpus_state_dict", {
    "0_4-3-2.safetensors": b"\x00" + safetensors(mlp([4, 3, 2], "f", "F32")),
    "1_4-3-2_gelu_dropout.safetensors": b"\x01" + safetensors(
        [(name.replace("2.", "3.", 1) if name.startswith("2.") else name, d, sh, raw)
         for name, d, sh, raw in mlp([4, 3, 2], "f", "F32")]),
    "2_2-3-2-1_f64.safetensors": b"\x02" + safetensors(mlp([2, 3, 2, 1], "d", "F64")),
    "3_nobias.safetensors": b"\x03" + safetensors(
        [t for t in mlp([4, 3, 2], "f", "F32") if t[0] != "0.bias"]),
    "0_f16.safetensors": b"\x00" + safetensors(
        [(name, "F16", shape, bytes(len(raw) // 2)) for name, _, shape, raw in mlp([4, 3, 2], "f", "F32")]),
})


def dlpack(version=0, major=None, deleter=0x80, flags=0, flag_bits=None, device=0, device_type=None,
           device_id=None, ndim=2, code=2, bits=32, lanes=1, layout=0, shape=(2, 3), strides=None, offset=b""):
    """Bytes fuzz_dlpack.c reads back as a DLManagedTensorVersioned, in its
    order: a version byte (>= 0xe0: a 4-byte major follows), the minor, the
    deleter byte, a flags byte (>= 0xe0: 8 bytes of flags follow), a device
    byte (>= 0xc0: a 4-byte DLDeviceType follows; odd: then a 4-byte
    device_id), ndim, the dtype (code, bits, 2-byte lanes), the layout bits (1 NULL shape, 2 strides, 4 byte_offset,
    8 NULL data), the sizes, the strides (read whether or not layout uses
    them) and the byte_offset. A size byte below 0xc0 means size & 7."""
    if strides is None:
        strides = bytes(min(max(ndim, 0), 40))
    out = bytes([version]) + (struct.pack("<I", major) if major is not None else b"") + bytes([0, deleter, flags])
    out += struct.pack("<Q", flag_bits) if flag_bits is not None else b""
    out += bytes([device]) + (struct.pack("<i", device_type) if device_type is not None else b"")
    out += struct.pack("<i", device_id) if device_id is not None else b""
    out += bytes([ndim & 0xff, code, bits]) + struct.pack("<H", lanes) + bytes([layout])
    return out + bytes(shape) + bytes(strides) + offset


HUGE_SIZES = bytes([0xf0] + [0xff] * 7 + [0x3f]) * 2 + bytes([2])  # 2^62 - 1, 2^62 - 1, 2
write("corpus_dlpack", {
    "f32_2x3.bin": dlpack(),
    "f64_scalar.bin": dlpack(ndim=0, bits=64, shape=()),
    "bf16_4.bin": dlpack(code=4, bits=16, ndim=1, shape=(4,)),
    "u8_strided.bin": dlpack(code=1, bits=8, layout=2, shape=(2, 3), strides=(3, 1)),
    "f32_transposed.bin": dlpack(layout=2, shape=(2, 3), strides=(1, 2)),
    "i64_offset.bin": dlpack(code=0, bits=64, ndim=1, shape=(3,), layout=4, offset=bytes([5])),
    "pinned.bin": dlpack(device=0x80),
    "cuda.bin": dlpack(device=0xa1, device_id=0),
    "rocm.bin": dlpack(device=0xc0, device_type=10),
    "read_only.bin": dlpack(flags=0xf0, flag_bits=1),
    "null_data_empty.bin": dlpack(shape=(0, 3), layout=8),
    "null_data.bin": dlpack(layout=8),
    "no_deleter.bin": dlpack(deleter=0),
    "bad_version.bin": dlpack(version=0xf0, major=2),
    "too_many_dims.bin": dlpack(ndim=9, shape=(1,) * 9),
    "negative_ndim.bin": dlpack(ndim=-1, shape=()),
    "huge_dims.bin": dlpack(ndim=3, shape=HUGE_SIZES),
    # The same with strides: the contiguity check multiplied the sizes
    # without an overflow check (undefined behaviour before the fix).
    "overflow_huge_dims_strided.bin": dlpack(ndim=3, layout=2, shape=HUGE_SIZES, strides=(1, 1, 1)),
    # byte_offset 2^64 - 1: data + byte_offset wrapped around (undefined).
    "overflow_byte_offset.bin": dlpack(layout=4, offset=bytes([0xf0] + [0xff] * 8)),
})


# fuzz_torch.c: a mode byte (bits 0-1 a spec of its SPECS, bit 2 byteorder
# "big", bit 7 raw), then either the whole file (raw) or data.pkl with its
# 2-byte length and each storage with its own, which the harness packs
# into an archive.
FIXTURES = HERE.parent / "torch_fixtures"


def torch_parts(name):
    """(data.pkl, [storage 0, storage 1, ...]) of a fixture."""
    with zipfile.ZipFile(FIXTURES / name) as z:
        names = z.namelist()
        prefix = next(n for n in names if n.endswith("/data.pkl"))[: -len("data.pkl")]
        storages = []
        while prefix + "data/%d" % len(storages) in names:
            storages.append(z.read(prefix + "data/%d" % len(storages)))
        return z.read(prefix + "data.pkl"), storages


def built(mode, name):
    pickle, storages = torch_parts(name)
    assert len(pickle) < 65536 and all(len(s) < 65536 for s in storages) and len(storages) <= 8, name
    return bytes([mode]) + struct.pack("<H", len(pickle)) + pickle + \
        b"".join(struct.pack("<H", len(s)) + s for s in storages)


torch_seeds = {
    "built_0_mlp.bin": built(0, "mlp.pt"),
    "built_0_shared.bin": built(0, "mlp_shared.pt"),
    "built_4_big_endian.bin": built(4, "mlp_big_endian.pt"),
    "built_0_parameters_p5.bin": built(0, "mlp_parameters_p5.pt"),
    "built_1_flatten.bin": built(1, "mlp_flatten.pt"),
    "built_0_tutorial.bin": built(0, "tutorial.pt"),
    "built_0_hostile_view.bin": built(0, "hostile_view.pt"),
}
for mode, name in [(0x80, "mlp.pt"), (0x80, "mlp_deflated.pt"), (0x80, "mlp_zip64.pt"),
                   (0x80, "mlp_no_byteorder.pt"), (0x80, "mlp_f64.pt"), (0x80, "legacy.pt"), (0x80, "dtypes.pt"),
                   (0x80, "batchnorm.pt"),
                   (0x80, "hostile_os_system.pt")]:
    torch_seeds["raw_%d_%s" % (mode & 3, name)] = bytes([mode]) + (FIXTURES / name).read_bytes()
write("corpus_torch", torch_seeds)
