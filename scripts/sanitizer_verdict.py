#!/usr/bin/env python3
"""What a compute-sanitizer log says about kiln, for scripts/gpu-check.sh.

    sanitizer_verdict.py LOG

compute-sanitizer counts every report in its ERROR SUMMARY, also those that
are not kiln's. Each report (a block of "========= " lines) is sorted into:

  kiln        a bad access, uninitialised read, race or sync error, or a CUDA
              API error raised by kiln's own calls: a finding
  foreign     a CUDA API error raised inside another library and handled
              there (NCCL probes each of its kernels with cudaFuncGetAttributes
              and skips the architectures it was not built for: error 209
              on the H200, 2026-11-27)
  oom         cudaErrorMemoryAllocation from kiln's own allocation: the tests
              that ask for too much on purpose (kiln reports OUT_OF_MEMORY)
  tool        "Internal Sanitizer Error": the tool lost track (racecheck
              with many host threads launching at once); the run proves
              nothing about the kernels it missed
  program     "Target application returned an error": the test program
              itself failed (its log says why), which the tool counts too

Prints one line of counts. Exit status: 1 when something is kiln's, else 3
when the tool lost track (inconclusive, whether the program failed after it
or not), else 1 when the program failed, else 0; 2 when the log cannot be
read.
"""
import re
import sys

KILN_LIBRARIES = ("libkiln.so", "libkiln_cuda.so")
HEADERS = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "LEAK SUMMARY")


def blocks(lines):
    """The reports: each a list of lines, the first one unindented."""
    current = []
    for line in lines:
        if not line.startswith("========="):
            continue
        body = line[len("========="):]
        if not body.strip():
            if current:
                yield current
            current = []
        elif body.startswith(" ") and not body.startswith("  "):
            if current:
                yield current
            current = [] if body.strip().startswith(HEADERS) else [body.strip()]
        elif current:
            current.append(body.strip())
    if current:
        yield current


def first_library(report):
    """The library of the first host frame: where the call was made."""
    for line in report:
        if line.startswith("Host Frame:"):
            m = re.search(r" in (\S+)$", line)
            return m.group(1) if m else ""
    return ""


def classify(report):
    head = report[0]
    if "Internal Sanitizer Error" in head:
        return "tool", ""
    if head.startswith("Target application returned an error"):
        return "program", ""
    if head.startswith("Program hit"):
        library = first_library(report)
        if re.match(r"lib.*\.so", library) and not library.startswith(KILN_LIBRARIES + ("libcudart",)):
            return "foreign", library
        if "cudaErrorMemoryAllocation" in head:
            return "oom", ""
    return "kiln", head


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    try:
        with open(sys.argv[1], errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as e:
        print(f"cannot read {sys.argv[1]}: {e}")
        return 2
    counts = {"kiln": 0, "foreign": 0, "oom": 0, "tool": 0, "program": 0}
    foreign, first_kiln = set(), ""
    for report in blocks(lines):
        kind, detail = classify(report)
        counts[kind] += 1
        if kind == "foreign":
            foreign.add(detail)
        elif kind == "kiln" and not first_kiln:
            first_kiln = detail
    line = "kiln's %(kiln)d, API errors inside other libraries %(foreign)d, deliberate OOM %(oom)d, " \
           "tool lost track %(tool)d" % counts
    if counts["program"]:
        line += ", the test program failed"
    if foreign:
        line += " (" + ", ".join(sorted(foreign)) + ")"
    if first_kiln:
        line += "; first: " + first_kiln[:160]
    print(line)
    # A program that fails after the tool lost track may have failed because
    # of it (racecheck's "failed to handle a hardware exception" left an
    # illegal address behind in a test that passes under memcheck, H200,
    # 2026-11-27): inconclusive, not a finding.
    if counts["kiln"]:
        return 1
    if counts["tool"]:
        return 3
    return 1 if counts["program"] else 0


if __name__ == "__main__":
    sys.exit(main())
