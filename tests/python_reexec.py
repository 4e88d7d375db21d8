"""Finding a Python that has the modules a check needs.

The interpreter CMake found may lack them while $KILN_PYTHON (e.g. a virtual
environment's, /work/venv/bin/python3), Debian's /usr/bin/python3
(python3-torch, python3-onnx) or the python3 on PATH has them, so a check
that fails to import them re-runs itself under the first interpreter that
can, and exits 77 (CTest's "skipped") when none can.
"""
import os
import shutil
import subprocess
import sys

_FLAG = "KILN_PYTHON_REEXEC"


def reexec_or_skip(modules):
    """Re-executes this script under the first interpreter at hand that
    imports every module in `modules` (e.g. ["torch", "safetensors.torch"]);
    exits 77 when none does. Call it where the imports failed."""
    names = ", ".join(modules)
    if os.environ.get(_FLAG):
        print("SKIP: cannot import %s" % names)
        sys.exit(77)
    # Paths compared as given, not resolved: a virtual environment's python3
    # links to the interpreter it was made from but has its own packages.
    here = os.path.abspath(sys.executable)
    for candidate in (os.environ.get("KILN_PYTHON"), "/usr/bin/python3", shutil.which("python3"),
                      shutil.which("python")):
        if not candidate or not os.path.exists(candidate) or os.path.abspath(candidate) == here:
            continue
        probe = subprocess.run([candidate, "-c", "import " + names], capture_output=True)
        if probe.returncode == 0:
            os.environ[_FLAG] = "1"
            os.execv(candidate, [candidate] + sys.argv)
    print("SKIP: cannot import %s (tried %s, $KILN_PYTHON, /usr/bin/python3, python3 on PATH)"
          % (names, sys.executable))
    sys.exit(77)
