#!/usr/bin/env python3
"""The mutation lane's driver (scripts/mutation.sh is its entry point).

Plants one bug at a time in kiln's sources, rebuilds what it changes, runs the
tests most likely to notice it first and, if they all pass, the rest of the
suite, then restores the source. A mutant is killed when a test fails or
times out, survives when the whole suite passes, is stale when its original
text no longer occurs exactly once in its file (the code moved on: the list
must follow), is broken when it does not compile (a bad entry), and is
skipped, unplanted and not counted, when this CPU lacks a feature its `cpu`
names (kiln would never run the mutated code here, so no test could kill it).

Mutants come from the curated list, tests/mutants/*.toml (one [[mutant]]
table each: id, file, original, mutant, tests, why, and cpu where the mutated
code runs only on CPUs with those features; see tests/mutants/README.md),
or, with --generate, from universalmutator (PyPI) over the given files: a
seeded sample of its mutants, each tried against the suite in the order the
curated entries of the same file name.

Exit status: 0 when every mutant run was killed, 1 otherwise (a survivor, a
stale or broken entry, or the time budget spent before the last mutant).
"""
import argparse
import difflib
import glob
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Sources compiled into libkiln.so alone: a mutant there relinks only it
# (the tests load it dynamically, and the plugins bind to its private symbols
# by the build ID, which only headers change). Anything else rebuilds all.
LIBKILN_DIRS = ("src/api/", "src/core/", "src/nn/", "src/train/", "src/io/", "src/plugin/", "src/backend/cpu/",
                "src/backend/registry.cpp", "src/backend/driver_probe.cpp", "src/distributed/communicator.cpp",
                "src/onnx/onnx.cpp")
# Never run per mutant, and why: test_install builds consumer projects with
# cmake (a minute, and it checks packaging, not behaviour); test_abi compares
# exported symbols, which no mutant of a function body changes.
NEVER = ("test_install", "test_abi")


def log(message=""):
    print(message, flush=True)


def cpu_flags():
    """The feature flags of this machine's CPU, as /proc/cpuinfo names them (empty elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def load_curated(paths):
    mutants, seen = [], set()
    for path in paths:
        with open(path, "rb") as f:
            data = tomllib.load(f)
        for m in data.get("mutant", []):
            missing = [k for k in ("id", "file", "original", "mutant", "tests", "why") if k not in m]
            if missing:
                sys.exit(f"mutation: {path}: a mutant lacks {', '.join(missing)}: {m}")
            if m["id"] in seen:
                sys.exit(f"mutation: {path}: mutant id {m['id']} repeats")
            if m["original"] == m["mutant"]:
                sys.exit(f"mutation: {path}: mutant {m['id']} changes nothing")
            if not isinstance(m.get("cpu", []), list):
                sys.exit(f"mutation: {path}: mutant {m['id']}: cpu is a list of /proc/cpuinfo flags")
            seen.add(m["id"])
            m["list"] = os.path.relpath(path, ROOT)
            mutants.append(m)
    return mutants


def generate(files, per_file, seed, curated):
    """A seeded sample of universalmutator's mutants of each file, as whole
    texts; each is tried first against the tests the curated entries of its
    file name."""
    if shutil.which("mutate") is None:
        sys.exit("mutation: --generate needs universalmutator's `mutate` on PATH (pip install universalmutator)")
    rng = random.Random(seed)
    out = []
    for rel in files:
        killers = []
        for m in curated:
            if m["file"] == rel:
                killers += [t for t in m["tests"] if t not in killers]
        with tempfile.TemporaryDirectory() as tmp:
            # --noCheck: kiln's build is the compiler check, run per mutant.
            subprocess.run(["mutate", os.path.join(ROOT, rel), "--mutantDir", tmp, "--noCheck"],
                           check=True, stdout=subprocess.DEVNULL, cwd=tmp)
            with open(os.path.join(ROOT, rel)) as f:
                lines = f.read().split("\n")
            names, changes = [], {}
            for name in sorted(glob.glob(os.path.join(tmp, "*.mutant.*"))):
                with open(name) as f:
                    mutated = f.read().split("\n")
                # The original lines a mutant replaces, or the line it inserts
                # after (break; / continue;), with what it writes instead.
                edits = []
                for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, lines, mutated, autojunk=False).get_opcodes():
                    if op != "equal":
                        at = range(i1, i2) if i2 > i1 else range(max(i1 - 1, 0), i1)
                        edits.append((list(at), i2 == i1, " / ".join(m.strip() for m in mutated[j1:j2])))
                # Mutants of comments, blank lines and lone braces are
                # equivalent (or do not compile): not sampled.
                code = [lines[i].strip() for at, _, _ in edits for i in at]
                if code and all(c and not c.startswith(("//", "/*", "*")) and c not in ("{", "}", "};")
                                and not c.startswith(("#include", "namespace", "}  // namespace")) for c in code):
                    names.append(name)
                    changes[name] = "; ".join(
                        f"after line {at[0] + 1}: {lines[at[0]].strip()} inserts {new}" if inserted else
                        f"line {at[0] + 1}: {' / '.join(lines[i].strip() for i in at)} ==> {new}"
                        for at, inserted, new in edits)
            for name in rng.sample(names, min(per_file, len(names))):
                with open(name) as f:
                    text = f.read()
                ident = os.path.basename(name)
                out.append({"id": ident, "file": rel, "text": text, "tests": killers, "why": changes[name],
                            "list": "universalmutator"})
    # In a seeded random order, so that a run cut short by its budget is
    # still a sample of every file, not the first files alone.
    rng.shuffle(out)
    return out


def ctest_names(build):
    listing = subprocess.run(["ctest", "--test-dir", build, "--show-only=json-v1"], capture_output=True, text=True,
                             check=True)
    return [t["name"] for t in json.loads(listing.stdout)["tests"]]


def run_tests(build, names, timeout, jobs, stop=True):
    """Runs the named CTest tests; returns those that failed (the first only
    when stop), comma-separated, or None."""
    if not names:
        return None
    regex = "^(" + "|".join(re.escape(n) for n in names) + ")$"
    result = subprocess.run(["ctest", "--test-dir", build, "-R", regex, "-j", str(jobs), "--timeout", str(timeout),
                             "--output-on-failure"] + (["--stop-on-failure"] if stop else []),
                            capture_output=True, text=True)
    if result.returncode == 0:
        return None
    failed = re.findall(r"^\s*\d+ - (\S+) \(", result.stdout, re.M)
    return ", ".join(failed) if failed else "ctest (" + result.stdout.strip().splitlines()[-1] + ")"


def run_named(build, names, timeout, stop=True):
    """Runs the named tests one at a time in the order given (ctest alone
    would run them in its own order), so that an entry names its fastest
    killer first; returns those that failed (the first only when stop),
    comma-separated, or None."""
    failed = []
    for name in names:
        by = run_tests(build, [name], timeout, 1)
        if by is not None:
            failed.append(by)
            if stop:
                break
    return ", ".join(failed) or None


def build(build_dir, rel):
    targets = ["kiln"] if rel.endswith((".cpp", ".c")) and rel.startswith(LIBKILN_DIRS) else []
    result = subprocess.run(["cmake", "--build", build_dir, "-j", str(os.cpu_count() or 2)] +
                            (["--target"] + targets if targets else []), capture_output=True, text=True)
    return result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", required=True, help="a configured and built CPU build directory")
    p.add_argument("--lists", nargs="*", default=None, help="curated lists (default: tests/mutants/*.toml)")
    p.add_argument("--only", nargs="*", default=None, help="run these mutant ids only")
    p.add_argument("--check", action="store_true", help="only check that every curated original text is there")
    p.add_argument("--generate", nargs="*", default=None, metavar="FILE",
                   help="run universalmutator's mutants of these files instead of the curated list")
    p.add_argument("--per-file", type=int, default=10, help="generated mutants sampled per file")
    p.add_argument("--seed", type=int, default=1, help="the sample's seed")
    p.add_argument("--timeout", type=int, default=300, help="seconds a test may run under a mutant")
    p.add_argument("--budget", type=float, default=0, help="stop starting mutants after this many seconds (0: none)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 2, help="tests run at once in the full suite")
    p.add_argument("--every-named", action="store_true",
                   help="run every test a mutant names and report each that fails (evidence), not the rest")
    p.add_argument("--json", help="write the per-mutant results here")
    args = p.parse_args()

    lists = args.lists or sorted(glob.glob(os.path.join(ROOT, "tests", "mutants", "*.toml")))
    curated = load_curated(lists)
    mutants = generate(args.generate, args.per_file, args.seed, curated) if args.generate is not None else curated
    if args.only:
        mutants = [m for m in mutants if m["id"] in args.only]
        unknown = set(args.only) - {m["id"] for m in mutants}
        if unknown:
            sys.exit("mutation: no mutant named " + ", ".join(sorted(unknown)))

    # Every original first, so that a stale entry fails the lane before an
    # hour of builds.
    stale = []
    for m in mutants:
        if "text" in m:
            continue
        with open(os.path.join(ROOT, m["file"])) as f:
            count = f.read().count(m["original"])
        if count != 1:
            stale.append(m)
            log(f"STALE    {m['id']} ({m['list']}): its original text occurs {count} times in {m['file']}, not once")
    if args.check or stale:
        log(f"mutation: {len(mutants) - len(stale)} of {len(mutants)} mutants match their sources")
        return 1 if stale else 0

    suite = [n for n in ctest_names(args.build) if n not in NEVER]
    results, start = [], time.monotonic()
    flags = cpu_flags()
    originals = {}

    def restore():
        for path, text in originals.items():
            with open(path, "w") as f:
                f.write(text)
        originals.clear()

    try:
        for i, m in enumerate(mutants):
            if args.budget and time.monotonic() - start > args.budget:
                log(f"mutation: the budget of {args.budget:.0f} s is spent; {len(mutants) - i} mutants not run")
                results += [{"id": n["id"], "file": n["file"], "outcome": "not run"} for n in mutants[i:]]
                break
            lacking = [f for f in m.get("cpu", []) if f not in flags]
            if lacking:
                results.append({"id": m["id"], "file": m["file"], "outcome": "skipped",
                                "change": m["why"] if "text" in m else m["mutant"]})
                log(f"SKIPPED  {m['id']:44} {m['file']} (this CPU lacks {', '.join(lacking)}: the code never runs here)")
                continue
            path = os.path.join(ROOT, m["file"])
            with open(path) as f:
                text = f.read()
            originals[path] = text
            with open(path, "w") as f:
                f.write(m["text"] if "text" in m else text.replace(m["original"], m["mutant"], 1))
            t0 = time.monotonic()
            ok, output = build(args.build, m["file"])
            outcome, by = "broken", None
            if ok:
                killers = [t for t in m["tests"] if t in suite]
                missing = [t for t in m["tests"] if t not in suite]
                if missing and "text" not in m:
                    log(f"  note: {m['id']} names tests this build lacks: {', '.join(missing)}")
                by = run_named(args.build, killers, args.timeout, stop=not args.every_named)
                if by is None and not args.every_named:
                    by = run_tests(args.build, [t for t in suite if t not in killers], args.timeout, args.jobs)
                    if by is not None and "text" not in m:
                        log(f"  note: {m['id']} was killed by {by}, which its entry does not name")
                outcome = "killed" if by else "survived"
            elif "text" in m:
                outcome = "stillborn"  # a generated mutant the compiler rejects: not counted
            restore()
            seconds = time.monotonic() - t0
            results.append({"id": m["id"], "file": m["file"], "outcome": outcome, "by": by,
                            "seconds": round(seconds, 1), "change": m["why"] if "text" in m else m["mutant"]})
            shown = f"by {by}" if by else ""
            log(f"{outcome.upper():8} {m['id']:44} {m['file']} {shown} ({seconds:.0f} s)")
            if outcome == "broken":
                log(output)
    finally:
        restore()
        # The build as the sources are again (the last mutant's object).
        build(args.build, "")

    counted = [r for r in results if r["outcome"] in ("killed", "survived")]
    killed = sum(r["outcome"] == "killed" for r in counted)
    survivors = [r for r in results if r["outcome"] == "survived"]
    elapsed = time.monotonic() - start
    log("")
    log(f"mutation: {len(counted)} mutants, {killed} killed, {len(survivors)} survived"
        + (f", score {100.0 * killed / len(counted):.1f}%" if counted else "") + f", in {elapsed:.0f} s")
    for r in survivors:
        log(f"  survivor: {r['id']} ({r['file']}): {r['change']}")
    other = [r for r in results if r["outcome"] not in ("killed", "survived")]
    for r in other:
        log(f"  {r['outcome']}: {r['id']} ({r['file']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"mutants": len(counted), "killed": killed, "survived": len(survivors),
                       "seconds": round(elapsed), "results": results}, f, indent=1)
    bad = survivors or [r for r in other if r["outcome"] not in ("stillborn", "skipped")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
