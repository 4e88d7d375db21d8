#!/usr/bin/env python3
"""Generates bindings/csharp/src/Native.g.cs from include/kiln/kiln.h.

The C# binding calls libkiln.so directly through P/Invoke. Everything whose
value or layout the header fixes comes from here, not from hand copies: the
public enums (with the header's comments as XML docs), the #define constants,
the raw struct layouts, the callback delegates, one SafeHandle class per
opaque type and one DllImport per KILN_API function.

Usage: generate.py HEADER OUTPUT. Any C type it cannot map is an error, so a
new declaration in kiln.h fails here instead of binding wrongly.
"""
import re
import sys

# C enum -> (C# name, prefixes stripped from its constants, [Flags], extra members,
# summary). An enum missing here is named from C (kiln_foo_bar -> FooBar).
ENUMS = {
    "kiln_status": ("Status", ["KILN_ERROR_", "KILN_"], False, [],
                    "Why a kiln call failed. Not a closed set: a code newer than this binding keeps its number."),
    "kiln_log_level": ("LogLevel", ["KILN_LOG_"], False, [], "The severity of a log record, and a context's threshold."),
    "kiln_device_kind": ("DeviceKind", ["KILN_DEVICE_"], False, [], "The kind of a device."),
    "kiln_dtype": ("DType", ["KILN_"], False, [], "The element type of a tensor."),
    "kiln_binary_op": ("BinaryOp", ["KILN_BINARY_"], False, [], "Elementwise operations of two operands."),
    "kiln_compare_op": ("CompareOp", ["KILN_COMPARE_"], False, [], "Elementwise comparisons (u8 results)."),
    "kiln_unary_op": ("UnaryOp", ["KILN_UNARY_"], False, [], "Elementwise operations of one operand."),
    "kiln_reduce_op": ("ReduceOp", ["KILN_REDUCE_"], False, [], "Reductions along one dimension."),
    "kiln_layer_kind": ("LayerKind", ["KILN_LAYER_"], False, [], "The layers of a model spec."),
    "kiln_predict_kind": ("PredictKind", ["KILN_PREDICT_"], False, [], "What Model.Predict returns."),
    "kiln_onnx_export_flags": ("OnnxExportFlags", ["KILN_ONNX_EXPORT_"], True, [],
                               "How Model.ExportOnnx writes a model (bits)."),
    "kiln_loss_kind": ("LossKind", ["KILN_LOSS_"], False, [], "The loss a trainer minimises."),
    "kiln_optimizer_kind": ("OptimizerKind", ["KILN_OPTIM_"], False, [], "A trainer's optimizer."),
    "kiln_lr_schedule": ("LrSchedule", ["KILN_LR_"], False, [], "How the learning rate changes over the steps."),
    "kiln_precision": ("Precision", ["KILN_PRECISION_"], False, [],
                       "The numeric precision of a trainer's steps (TF32: CUDA only; BF16: mixed precision)."),
    "kiln_fast_path": ("FastPath", ["KILN_FAST_PATH_"], True,
                       [("None", "0", "No part: every step runs as the plain sequence of kernels.")],
                       "The parts of a backend's fast path, each of which can be switched off to bisect a failure."),
    "kiln_progress_phase": ("ProgressPhase", ["KILN_PROGRESS_"], False, [], "When a progress report is made."),
}
CS_KEYWORDS = {"out", "ref", "in", "params", "string", "object", "base", "event", "fixed", "lock", "checked"}
# Words kept as written rather than capitalised.
WORDS = {"DTYPE": "DType", "IO": "IO", "FP32": "FP32", "TF32": "TF32", "BF16": "BF16", "ADAMW": "AdamW"}
# Structs the hand-written layer declares (public, same layout).
HAND_STRUCTS = {"kiln_device": "Device"}
# Parameters whose pointer is not the usual out-value: (function, parameter) -> C# type.
OVERRIDES = {
    ("kiln_tensor_shape", "shape"): "long[]",
    ("kiln_communicator_create_local", "out"): "IntPtr[]",
    ("kiln_trainer_step", "loss"): "double*",  # NULL: the loss is not read back
    ("kiln_trainer_evaluate", "loss"): "out double",
    ("kiln_trainer_evaluate", "accuracy"): "out double",
}
SCALARS = {"int": "int", "int64_t": "long", "uint64_t": "ulong", "uint32_t": "uint", "double": "double",
           "void": "void"}


def pascal(words):
    return "".join(WORDS.get(w, w[:1].upper() + w[1:].lower()) for w in words.split("_") if w)


def ident(name):
    return "@" + name if name in CS_KEYWORDS else name


def xml(text):
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def comment_text(c):
    c = re.sub(r"^/\*+|\*+/$", "", c.strip())
    lines = [re.sub(r"^\s*\*\s?", "", l).strip() for l in c.splitlines()]
    return " ".join(l for l in lines if l)


class Header:
    def __init__(self, text):
        self.text = text
        code = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
        self.code = code
        self.opaque = re.findall(r"typedef struct (kiln_\w+) \1;", code)
        self.structs = dict(re.findall(r"typedef struct (kiln_\w+) \{(.*?)\} \1;", code, re.S))
        self.fnptrs = {m[1]: m for m in re.findall(r"typedef (\w+) \(\*(kiln_\w+)\)\((.*?)\);", code, re.S)}
        self.enums = {}
        for m in re.finditer(r"typedef enum (kiln_\w+) \{(.*?)\} \1;", text, re.S):
            self.enums[m.group(1)] = m.group(2)
        self.defines = re.findall(r"^#define (KILN_\w+) (\d+|\(INT64_C\(\d+\) << \d+\))\s*$", code, re.M)
        self.functions = []
        for m in re.finditer(r"KILN_API ([^;(]*?)\b(kiln_\w+)\((.*?)\);", code, re.S):
            ret, name, params = (re.sub(r"\s+", " ", g).strip() for g in m.groups())
            self.functions.append((ret, name, [] if params == "void" else [p.strip() for p in params.split(",")]))


def split_param(p):
    m = re.match(r"^(const )?(\w+)\s*(\**)\s*(\w+)(\[\d+\])?$", p)
    if not m:
        raise SystemExit("generate.py: cannot read parameter %r" % p)
    return bool(m.group(1)), m.group(2), len(m.group(3)), m.group(4), m.group(5)


class Generator:
    def __init__(self, h):
        self.h = h
        self.out = []

    def value_type(self, base, where):
        if base in SCALARS:
            return SCALARS[base]
        if base in self.h.enums:
            return ENUMS[base][0] if base in ENUMS else pascal(base[len("kiln_"):])
        if base in HAND_STRUCTS:
            return HAND_STRUCTS[base]
        if base in self.h.fnptrs:
            return base
        if base in self.h.structs:
            return base
        raise SystemExit("generate.py: no C# type for %s in %s" % (base, where))

    def handle(self, base):
        return pascal(base[len("kiln_"):]) + "Handle"

    def param_type(self, fn, p, is_release):
        t, name = self.raw_param_type(fn, p, is_release)
        return t, ident(name)

    def raw_param_type(self, fn, p, is_release):
        const, base, stars, name, _ = split_param(p)
        if (fn, name) in OVERRIDES:
            return OVERRIDES[(fn, name)], ident(name)
        where = "%s(%s)" % (fn, name)
        if stars == 0:
            return self.value_type(base, where), name
        if base == "char":
            # A string goes as the bytes Arg.Text makes (NUL-terminated UTF-8,
            # checked for NULs and null), never as a string the marshaller
            # converts: C would read one holding a NUL only up to it.
            if stars == 1:
                return "byte[]", name
            if stars == 2 and const:
                return "out IntPtr", name
        if base == "void" and stars == 1:
            return "IntPtr", name
        if base in self.h.opaque:
            if stars == 1:
                return ("IntPtr" if is_release else self.handle(base)), name
            if stars == 2:
                return "out " + self.handle(base), name
        if stars == 1:
            t = self.value_type(base, where)
            if const:
                return t + "[]", name
            if base in self.h.structs and "struct_size" in self.h.structs[base]:
                return "ref " + t, name  # the caller sets struct_size
            return "out " + t, name
        raise SystemExit("generate.py: no C# type for %r in %s" % (p, fn))

    def emit(self, line=""):
        self.out.append(line)

    def enums(self):
        for cname, body in self.h.enums.items():
            entries, docs, line_of = [], {}, {}
            # A comment documents the constants on the line where it starts.
            for m in re.finditer(r"(KILN_\w+)\s*=\s*(\w+)|/\*.*?\*/", body, re.S):
                line = body.count("\n", 0, m.start())
                if m.group(1):
                    entries.append((m.group(1), m.group(2)))
                    line_of[m.group(1)] = line
                else:
                    for n, l in line_of.items():
                        if l == line and n not in docs:
                            docs[n] = comment_text(m.group(0))
            if cname in ENUMS:
                csname, prefixes, flags, extra, summary = ENUMS[cname]
            else:  # an enum newer than the table: named from C, prefix shared by its constants
                names = [n for n, _ in entries]
                common = names[0][:names[0].rfind("_") + 1]
                while not all(n.startswith(common) for n in names):
                    common = common[:common[:-1].rfind("_") + 1]
                csname, prefixes, flags, extra, summary = self.value_type(cname, cname), [common], False, [], \
                    "The values of %s." % cname
            numeric = {n: v for n, v in entries if v.isdigit()}
            aliases = [(n, v) for n, v in entries if not v.isdigit()]
            # Where the header has prefixed aliases, they are the names to use.
            chosen = [(n, numeric[v], docs.get(v, "")) for n, v in aliases] if aliases else \
                     [(n, v, docs.get(n, "")) for n, v in entries]
            self.emit("    /// <summary>%s Generated from <c>%s</c>.</summary>" % (xml(summary), cname))
            if flags:
                self.emit("    [Flags]")
            self.emit("    public enum %s%s" % (csname, " : uint" if flags else ""))
            self.emit("    {")
            for name, value, doc in extra:
                self.emit("        /// <summary>%s</summary>" % xml(doc))
                self.emit("        %s = %s," % (name, value))
            for name, value, doc in chosen:
                short = next((name[len(p):] for p in prefixes if name.startswith(p)), None)
                if short is None:
                    raise SystemExit("generate.py: %s has none of the prefixes %s" % (name, prefixes))
                text = "<c>%s</c>%s" % (name, (": " + xml(doc)) if doc else ".")
                self.emit("        /// <summary>%s</summary>" % text)
                self.emit("        %s = %s," % (pascal(short), value))
            self.emit("    }")
            self.emit()

    def constants(self):
        self.emit("    /// <summary>The <c>#define</c> constants of kiln.h this binding was generated from.</summary>")
        self.emit("    public static class HeaderConstants")
        self.emit("    {")
        for name, value in self.h.defines:
            m = re.match(r"\(INT64_C\((\d+)\) << (\d+)\)", value)
            cs = "%sL << %s" % m.groups() if m else value
            t = "long" if m else "int"
            self.emit("        /// <summary><c>%s</c>.</summary>" % name)
            self.emit("        public const %s %s = %s;" % (t, pascal(name[len("KILN_"):]), cs))
        self.emit("    }")
        self.emit()

    def structs(self):
        for cname, body in self.h.structs.items():
            if cname in HAND_STRUCTS:
                continue
            self.emit("    /// <summary>The layout of <c>%s</c>.</summary>" % cname)
            self.emit("    [StructLayout(LayoutKind.Sequential)]")
            self.emit("    internal unsafe struct %s" % cname)
            self.emit("    {")
            for field in filter(None, (f.strip() for f in body.split(";"))):
                field = re.sub(r"\s+", " ", field)
                const, base, stars, name, array = split_param(field)
                if array:
                    if base != "char":
                        raise SystemExit("generate.py: array field %s" % field)
                    self.emit("        internal fixed byte %s%s;" % (name, array))
                elif stars:
                    self.emit("        internal IntPtr %s;" % name)
                else:
                    self.emit("        internal %s %s;" % (self.value_type(base, cname), name))
            self.emit("    }")
            self.emit()

    def delegates(self):
        for name, (ret, _, params) in self.h.fnptrs.items():
            args = []
            for p in params.split(","):
                const, base, stars, pname, _ = split_param(re.sub(r"\s+", " ", p.strip()))
                args.append(("IntPtr" if stars else self.value_type(base, name)) + " " + pname)
            self.emit("    [UnmanagedFunctionPointer(CallingConvention.Cdecl)]")
            self.emit("    internal delegate %s %s(%s);" % (self.value_type(ret, name), name, ", ".join(args)))
            self.emit()

    def handles(self):
        names = {f[1] for f in self.h.functions}
        for base in self.h.opaque:
            release = base + "_release"
            if release not in names:
                raise SystemExit("generate.py: %s has no %s" % (base, release))
            self.emit("    /// <summary>Owns one reference to a <c>%s</c>; releasing calls %s.</summary>" % (base, release))
            self.emit("    internal sealed partial class %s : KilnHandle" % self.handle(base))
            self.emit("    {")
            self.emit("        protected override void Release(IntPtr pointer) => NativeMethods.%s(pointer);" % release)
            self.emit("    }")
            self.emit()

    def functions(self):
        self.emit("    /// <summary>One P/Invoke declaration per KILN_API function, named as in C.</summary>")
        self.emit("    internal static unsafe partial class NativeMethods")
        self.emit("    {")
        abi = dict(self.h.defines)["KILN_ABI_VERSION"]
        self.emit("        /// <summary>The soname of the ABI this file was generated for: a libkiln of")
        self.emit("        /// another ABI is another file, never loaded in its place.</summary>")
        self.emit('        internal const string Lib = "libkiln.so.%s";' % abi)
        for ret, name, params in self.h.functions:
            is_release = name.endswith("_release")
            args = [" ".join(self.param_type(name, p, is_release)) for p in params]
            if ret in ("const char *", "const char*"):
                rt = "IntPtr"
            else:
                rt = self.value_type(ret, name)
            self.emit("        [DllImport(Lib, CallingConvention = CallingConvention.Cdecl, ExactSpelling = true)]")
            self.emit("        internal static extern %s %s(%s);" % (rt, name, ", ".join(args)))
        self.emit("    }")

    def run(self):
        self.emit("// Generated by bindings/csharp/generate.py from include/kiln/kiln.h: do not edit.")
        self.emit("using System;")
        self.emit("using System.Runtime.InteropServices;")
        self.emit()
        self.emit("namespace Kiln")
        self.emit("{")
        self.enums()
        self.constants()
        self.structs()
        self.delegates()
        self.handles()
        self.functions()
        self.emit("}")
        return "\n".join(self.out) + "\n"


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: generate.py HEADER OUTPUT")
    with open(sys.argv[1]) as f:
        text = Generator(Header(f.read())).run()
    with open(sys.argv[2], "w") as f:
        f.write(text)


main()
