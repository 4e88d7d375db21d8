#!/usr/bin/env python3
"""Packages the crates kiln-sys and kiln with `cargo package` and lays them
out for a program that depends on them offline:

  DEST/crates/kiln-sys-VERSION.crate, kiln-VERSION.crate   what `cargo package` made
  DEST/cargo/kiln-sys-VERSION/, kiln-VERSION/              the same, unpacked with a
      .cargo-checksum.json each: a directory source, the layout `cargo vendor`
      writes, for `[source.crates-io] replace-with` in a project's .cargo/config.toml

`cargo package` verifies each crate by building it from its own .crate, in
a scratch directory: kiln-sys against the kiln of BUILD_DIR (KILN_LIB_DIR), and
kiln against the kiln-sys crate just packaged (crates-io replaced by DEST/cargo),
so both are known to build from what they ship, with no registry.

Usage: package.py BUILD_DIR DEST
"""
import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

here = os.path.dirname(os.path.abspath(__file__))


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def unpack(crate, into):
    """crate's files under into/NAME-VERSION/, with the checksums a directory source needs."""
    with tarfile.open(crate) as t:
        top = {m.name.split("/")[0] for m in t.getmembers()}
        if len(top) != 1 or any(m.name.startswith("/") or ".." in m.name.split("/") for m in t.getmembers()):
            sys.exit("package.py: unexpected layout in " + crate)
        t.extractall(into)
    unpacked = os.path.join(into, top.pop())
    files = {}
    for d, _, names in os.walk(unpacked):
        for name in names:
            path = os.path.join(d, name)
            files[os.path.relpath(path, unpacked)] = sha256(path)
    with open(os.path.join(unpacked, ".cargo-checksum.json"), "w") as f:
        json.dump({"files": files, "package": sha256(crate)}, f, sort_keys=True)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: package.py BUILD_DIR DEST")
    build, dest = (os.path.abspath(a) for a in sys.argv[1:])
    crates, source = os.path.join(dest, "crates"), os.path.join(dest, "cargo")
    for d in (crates, source):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    env = dict(os.environ, KILN_LIB_DIR=build)
    with tempfile.TemporaryDirectory() as target:
        env["CARGO_TARGET_DIR"] = target
        replaced = ["--config", 'source.crates-io.replace-with="kiln-packaged"',
                    "--config", 'source.kiln-packaged.directory="%s"' % source]
        for crate, extra in (("kiln-sys", []), ("kiln", replaced)):
            # --allow-dirty: the crates are what is checked out, committed or not, as
            # every other artifact of the build is.
            subprocess.run(["cargo", "package", "--offline", "--allow-dirty", "-q", "-p", crate] + extra,
                           cwd=here, env=env, check=True)
            made = glob.glob(os.path.join(target, "package", crate + "-[0-9]*.crate"))
            if len(made) != 1:
                sys.exit("package.py: cargo package made %s" % made)
            shutil.copy(made[0], crates)
            unpack(made[0], source)
    print("package.py: %s in %s, and as a directory source in %s"
          % (", ".join(sorted(os.listdir(crates))), crates, source))


main()
