#!/usr/bin/env python3
"""Writes this Go module as a module proxy directory, the layout `go help
goproxy` describes, so that a program outside the repository gets the module
with GOPROXY=file://DEST and no `replace`, as it would from a proxy:

  DEST/<module path>/@v/list, vVERSION.info, vVERSION.mod, vVERSION.zip

VERSION is kiln's (KILN_VERSION_* of include/kiln/kiln.h): the module and the
library it binds have one version. The zip holds every file of the module
directory (LICENSE's target, not the link) under <module>@vVERSION/.

Usage: proxy.py DEST
"""
import datetime
import json
import os
import re
import subprocess
import sys
import zipfile

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))


def kiln_version():
    header = open(os.path.join(root, "include/kiln/kiln.h")).read()
    return ".".join(re.search(r"#define KILN_VERSION_%s (\d+)" % k, header).group(1) for k in ("MAJOR", "MINOR", "PATCH"))


def module_files():
    found = []
    for d, dirs, files in os.walk(here):
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
        found += [os.path.relpath(os.path.join(d, f), here) for f in sorted(files)
                  if not f.startswith(".") and f != os.path.basename(__file__)]
    return found


def commit_time():
    """The commit's time, which the proxy reports as the version's; now outside a checkout."""
    try:
        out = subprocess.run(["git", "-C", here, "log", "-1", "--format=%cI"], capture_output=True, text=True, check=True)
        stamp = datetime.datetime.fromisoformat(out.stdout.strip())
    except (OSError, subprocess.CalledProcessError, ValueError):
        stamp = datetime.datetime.now(datetime.timezone.utc)
    return stamp.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: proxy.py DEST")
    go_mod = open(os.path.join(here, "go.mod")).read()
    module = re.search(r"^module\s+(\S+)", go_mod, re.M).group(1)
    version = "v" + kiln_version()
    at = os.path.join(os.path.abspath(sys.argv[1]), module, "@v")
    os.makedirs(at, exist_ok=True)
    with zipfile.ZipFile(os.path.join(at, version + ".zip"), "w", zipfile.ZIP_DEFLATED) as z:
        for name in module_files():
            info = zipfile.ZipInfo("%s@%s/%s" % (module, version, name), date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            with open(os.path.join(here, name), "rb") as f:  # a link's target
                z.writestr(info, f.read())
    with open(os.path.join(at, version + ".mod"), "w") as f:
        f.write(go_mod)
    with open(os.path.join(at, version + ".info"), "w") as f:
        json.dump({"Version": version, "Time": commit_time()}, f)
    with open(os.path.join(at, "list"), "w") as f:
        f.write(version + "\n")
    print("proxy.py: %s %s in %s" % (module, version, sys.argv[1]))


main()
