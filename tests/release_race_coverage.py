#!/usr/bin/env python3
"""Checks that test_release_race races every function of the public headers
that takes a handle (a parameter `kiln_X *name`, X a handle type), so that a
function added to kiln.h cannot be left out of it.

    release_race_coverage.py INCLUDE_DIR TEST_RELEASE_RACE
"""
import re
import subprocess
import sys

HANDLES = ("kiln_context", "kiln_context_options", "kiln_tensor", "kiln_model_spec", "kiln_model", "kiln_dataset",
           "kiln_trainer_options", "kiln_trainer", "kiln_history", "kiln_communicator")


def handle_taking_functions(include_dir):
    names = set()
    for header in ("kiln.h", "dlpack.h"):
        with open(f"{include_dir}/{header}", encoding="utf-8") as f:
            text = re.sub(r"/\*.*?\*/", "", f.read(), flags=re.S)
        for name, params in re.findall(r"KILN_API\s+[^;(]*?\b(kiln_\w+)\s*\(([^;]*?)\)\s*;", text, flags=re.S):
            if name.endswith("_release"):
                continue  # what is raced against
            for param in params.split(","):
                param = " ".join(param.split())
                if any(re.fullmatch(rf"(const )?{h} ?\* ?\w+", param) for h in HANDLES):
                    names.add(name)
    return names


def main():
    include_dir, program = sys.argv[1], sys.argv[2]
    want = handle_taking_functions(include_dir)
    raced = set(subprocess.run([program, "--list"], check=True, capture_output=True, text=True).stdout.split())
    missing, unknown = sorted(want - raced), sorted(raced - want)
    for name in missing:
        print(f"not raced by test_release_race: {name}")
    for name in unknown:
        print(f"raced but not a handle-taking function of the headers: {name}")
    print(f"{len(want)} handle-taking functions, {len(raced)} raced")
    return 1 if missing or unknown else 0


if __name__ == "__main__":
    sys.exit(main())
