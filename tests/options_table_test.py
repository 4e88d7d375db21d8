"""The trainer options table (src/train/options_table.h) against everything
that lists the options by hand: kiln.h's setter declarations and the Go,
Rust and C# bindings' option lists. The setters themselves, the trainer's
checks, the fingerprint, the checkpoint fields and the kiln program's flags
are generated from the table, so they need no check here.

    python3 tests/options_table_test.py [REPO_ROOT]

Fails, listing every problem, when a row's setter is not declared in kiln.h
with the row's parameter type, when kiln.h declares an option setter no row
names, when a binding does not call a row's setter, or when a row gives a
flag to an option the kiln program cannot set from one value.
"""
import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

BINDINGS = {
    "Go (bindings/go/train.go)": ("bindings/go/train.go", "capi.Trainer_options_set_{}("),
    "Rust (bindings/rust/kiln/src/train.rs)": ("bindings/rust/kiln/src/train.rs", "sys::kiln_trainer_options_set_{}("),
    "C# (bindings/csharp/src/Trainer.cs)": ("bindings/csharp/src/Trainer.cs", "NativeMethods.kiln_trainer_options_set_{}("),
}
COLUMNS = ["id", "setter", "kind", "ctype", "dflt", "lo", "hi", "flags", "names", "flag", "meta", "unit",
           "help"]


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def split_arguments(text):
    """The top-level comma-separated arguments of a macro call's text."""
    args, depth, current, quoted = [], 0, "", False
    for i, c in enumerate(text):
        if c == '"' and (i == 0 or text[i - 1] != "\\"):
            quoted = not quoted
        if not quoted:
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
            elif c == "," and depth == 0:
                args.append(current.strip())
                current = ""
                continue
        current += c
    args.append(current.strip())
    return args


def table_rows():
    text = read("src/train/options_table.h")
    rows = []
    for m in re.finditer(r"^(KILN_OPTION(?:_CUSTOM)?)\(", text, re.M):
        depth, i = 1, m.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        args = split_arguments(re.sub(r"\s+", " ", text[m.end():i - 1]))
        if len(args) != len(COLUMNS):
            sys.exit("FAIL: a row of options_table.h has %d columns, not %d: %s" % (len(args), len(COLUMNS), args))
        row = dict(zip(COLUMNS, args))
        row["custom"] = m.group(1) == "KILN_OPTION_CUSTOM"
        row["flag"] = row["flag"].strip('"')
        rows.append(row)
    return rows


def declared_setters():
    """kiln.h's kiln_trainer_options_set_* declarations: name -> parameter types after the options."""
    text = re.sub(r"/\*.*?\*/", " ", read("include/kiln/kiln.h"), flags=re.S)
    setters = {}
    for m in re.finditer(r"kiln_trainer_options_set_(\w+)\(([^)]*)\)", text):
        params = [re.sub(r"\s+", " ", p).strip() for p in m.group(2).split(",")]
        types = [re.sub(r"\s*\b\w+$", "", p).strip() for p in params[1:]]
        setters[m.group(1)] = types
    return setters


def main():
    rows = table_rows()
    setters = declared_setters()
    problems = []
    named = set()
    for row in rows:
        setter = row["setter"]
        named.add(setter)
        if setter not in setters:
            problems.append("row %s: kiln.h declares no kiln_trainer_options_set_%s" % (row["id"], setter))
            continue
        if not row["custom"]:
            if setter != row["id"]:
                problems.append("row %s: a KILN_OPTION row's setter is its id, not %s" % (row["id"], setter))
            if setters[setter] != [row["ctype"]]:
                problems.append("row %s: kiln.h's setter takes (%s), the table says (%s)"
                                % (row["id"], ", ".join(setters[setter]), row["ctype"]))
        if row["flag"] and (row["custom"] or row["kind"] not in ("DOUBLE", "INT", "UINT", "BITS", "ENUM")):
            problems.append("row %s: the kiln program sets flags through one-value setters of numbers or names; "
                            "this row cannot have the flag --%s" % (row["id"], row["flag"]))
    for setter in sorted(set(setters) - named):
        problems.append("kiln.h declares kiln_trainer_options_set_%s, which no row of options_table.h names" % setter)
    for binding, (path, pattern) in BINDINGS.items():
        text = read(path)
        for setter in sorted(named):
            if pattern.format(setter) not in text:
                problems.append("%s never calls kiln_trainer_options_set_%s" % (binding, setter))
    if problems:
        for p in problems:
            print("FAIL: " + p)
        sys.exit(1)
    print("PASS: %d options, %d setters, in kiln.h and the Go, Rust and C# bindings" % (len(rows), len(named)))


if __name__ == "__main__":
    main()
