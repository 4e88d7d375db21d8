#!/usr/bin/env python3
"""Unpacks Debian packages into a prefix with Python alone, where dpkg is
missing (a bare GPU image may lack it; scripts/gpu-check.sh unpacks the
carried packages this way).

    scripts/unpack-deb.py PREFIX PACKAGE.deb...

Each .deb is an ar archive holding data.tar.xz (or .gz, .bz2, uncompressed):
its files land under PREFIX as dpkg -x would put them under /, except that
documentation (usr/share/doc, man, lintian) is left out and a symbolic link
to an absolute path points into PREFIX instead (zlib1g-dev's libz.so names
/lib/x86_64-linux-gnu/...). Members that would land outside PREFIX (.., an
absolute name) and device files are refused. zstd-compressed members
(Ubuntu's packages) need Python 3.14; Debian's use xz. Exit status 1 with
the reason for a file that is not such a package.
"""
import io
import os
import sys
import tarfile

SKIPPED = ("usr/share/doc/", "usr/share/man/", "usr/share/lintian/")


def ar_members(data):
    """(name, bytes) of each member of an ar archive."""
    if not data.startswith(b"!<arch>\n"):
        raise ValueError("not an ar archive (no !<arch> magic)")
    pos = 8
    while pos + 60 <= len(data):
        header = data[pos:pos + 60]
        name = header[:16].decode("ascii", "replace").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        if header[58:60] != b"`\n":
            raise ValueError("corrupt ar member header at byte %d" % pos)
        yield name, data[pos + 60:pos + 60 + size]
        pos += 60 + size + (size & 1)


def unpack(deb, prefix):
    with open(deb, "rb") as f:
        data = f.read()
    members = dict(ar_members(data))
    name = next((n for n in members if n.startswith("data.tar")), None)
    if name is None:
        raise ValueError("no data.tar member (members: %s)" % ", ".join(members))
    if name.endswith(".zst"):
        raise ValueError("data.tar.zst needs Python 3.14's zstd support")
    root = os.path.realpath(prefix)
    count = 0
    with tarfile.open(fileobj=io.BytesIO(members[name]), mode="r:*") as tar:
        for m in tar.getmembers():
            name = m.name[2:] if m.name.startswith("./") else m.name
            rel = os.path.normpath(name or ".")
            if os.path.isabs(name) or rel == ".." or rel.startswith("../"):
                raise ValueError("member %r would land outside the prefix" % m.name)
            if rel == "." or rel.startswith(SKIPPED):
                continue
            dest = os.path.join(root, rel)
            if m.isdir():
                os.makedirs(dest, exist_ok=True)
            elif m.issym():
                target = m.linkname
                if os.path.isabs(target):  # point into the prefix, not at the host's /
                    target = os.path.relpath(os.path.join(root, target.lstrip("/")), os.path.dirname(dest))
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                if os.path.lexists(dest):
                    os.remove(dest)
                os.symlink(target, dest)
            elif m.isfile():
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                if os.path.lexists(dest):
                    os.remove(dest)
                with tar.extractfile(m) as src, open(dest, "wb") as out:
                    out.write(src.read())
                os.chmod(dest, m.mode & 0o755)
            elif m.islnk():
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                if os.path.lexists(dest):
                    os.remove(dest)
                link = m.linkname[2:] if m.linkname.startswith("./") else m.linkname
                os.link(os.path.join(root, os.path.normpath(link)), dest)
            else:
                raise ValueError("member %r is a device or fifo" % m.name)
            count += 1
    return count


def main():
    if len(sys.argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    prefix = sys.argv[1]
    os.makedirs(prefix, exist_ok=True)
    for deb in sys.argv[2:]:
        try:
            n = unpack(deb, prefix)
        except (OSError, ValueError, tarfile.TarError, KeyError) as e:
            sys.stderr.write("unpack-deb: %s: %s\n" % (deb, e))
            return 1
        print("unpack-deb: %s: %d entries into %s" % (os.path.basename(deb), n, prefix))
    return 0


if __name__ == "__main__":
    sys.exit(main())
