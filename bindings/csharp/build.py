#!/usr/bin/env python3
"""Builds Kiln.dll with mcs as src/Kiln.csproj describes it, and lays it out as
a NuGet package. Debian has mono but no dotnet SDK, so the .csproj cannot be
built here; this script takes its settings from it instead, and fails when the
.csproj says something this build does not do (so the two cannot drift).

Usage: build.py BUILD_DIR OUT_DIR
  BUILD_DIR  a kiln build tree (libkiln.so, and the plugins when built)
  OUT_DIR    gets Kiln.dll, Kiln.xml (XML docs) and package/, the NuGet layout:
             Kiln.nuspec, lib/netstandard2.0/Kiln.{dll,xml},
             runtimes/linux-x64/native/libkiln*.so; and Kiln.VERSION.nupkg.
"""
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
import zipfile

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(os.path.dirname(here))
src = os.path.join(here, "src")
NATIVE = "runtimes/linux-x64/native/"
# The settings this script implements; any other property is an error.
KNOWN = {"TargetFramework", "AssemblyName", "RootNamespace", "PackageId", "Version", "Authors", "Description",
         "LangVersion", "AllowUnsafeBlocks", "GenerateDocumentationFile", "TreatWarningsAsErrors", "KilnNativeDir"}


def fail(message):
    sys.exit("build.py: " + message)


def read_csproj():
    project = ET.parse(os.path.join(src, "Kiln.csproj")).getroot()
    if project.get("Sdk") != "Microsoft.NET.Sdk":
        fail("Kiln.csproj: an SDK-style project expected")
    props, packages, natives = {}, [], []
    for group in project.iter("PropertyGroup"):
        for p in group:
            if p.tag not in KNOWN:
                fail("Kiln.csproj sets %s, which build.py does not implement" % p.tag)
            props[p.tag] = (p.text or "").strip()
    for item in project.iter("ItemGroup"):
        for i in item:
            if i.tag == "PackageReference":
                packages.append((i.get("Include"), i.get("Version")))
            elif i.tag == "None" and i.get("Pack") == "true":
                natives.append(i)
            else:
                fail("Kiln.csproj has a <%s> item, which build.py does not implement" % i.tag)
    return props, packages, natives


def check(props, packages, natives):
    header = open(os.path.join(root, "include/kiln/kiln.h")).read()
    version = ".".join(re.search(r"#define KILN_VERSION_%s (\d+)" % k, header).group(1) for k in ("MAJOR", "MINOR", "PATCH"))
    want = {"TargetFramework": "netstandard2.0", "AssemblyName": "Kiln", "Version": version, "LangVersion": "7.2",
            "AllowUnsafeBlocks": "true", "GenerateDocumentationFile": "true", "TreatWarningsAsErrors": "true"}
    for key, value in want.items():
        if props.get(key) != value:
            fail("Kiln.csproj: %s is %r, the mcs build uses %r" % (key, props.get(key), value))
    if [p[0] for p in packages] != ["System.Memory"]:
        fail("Kiln.csproj: package references %s; the mcs build has System.Memory only (Span, in Mono's mscorlib)" % packages)
    if not natives or any(n.get("PackagePath") != NATIVE for n in natives):
        fail("Kiln.csproj: the native libraries must be packed under " + NATIVE)
    names = [os.path.basename(n.get("Include")) for n in natives]
    if names[0] != "libkiln.so" or natives[0].get("Condition"):
        fail("Kiln.csproj: libkiln.so must be the first native library, unconditionally")
    return names


def sources():
    # The SDK compiles **/*.cs under the project directory (except bin/ and obj/).
    found = []
    for d, dirs, files in os.walk(src):
        dirs[:] = sorted(x for x in dirs if x not in ("bin", "obj"))
        found += [os.path.join(d, f) for f in sorted(files) if f.endswith(".cs")]
    return found


def main():
    if len(sys.argv) != 3:
        fail("usage: build.py BUILD_DIR OUT_DIR")
    build, out = (os.path.abspath(a) for a in sys.argv[1:])
    props, packages, natives = read_csproj()
    native_names = check(props, packages, natives)
    version = props["Version"]
    os.makedirs(out, exist_ok=True)
    info = os.path.join(out, "AssemblyInfo.g.cs")
    with open(info, "w") as f:  # what the SDK generates from the same properties
        f.write('[assembly: System.Reflection.AssemblyVersion("%s.0")]\n' % version)
        f.write('[assembly: System.Reflection.AssemblyFileVersion("%s.0")]\n' % version)
        f.write('[assembly: System.Reflection.AssemblyInformationalVersion("%s")]\n' % version)
        f.write('[assembly: System.Reflection.AssemblyTitle("%s")]\n' % props["AssemblyName"])
        f.write('[assembly: System.Reflection.AssemblyDescription("%s")]\n' % props["Description"].replace('"', "'"))
    dll, doc = os.path.join(out, "Kiln.dll"), os.path.join(out, "Kiln.xml")
    subprocess.run(["mcs", "-target:library", "-langversion:" + props["LangVersion"], "-unsafe", "-warnaserror",
                    "-nologo", "-doc:" + doc, "-out:" + dll, info] + sources(), check=True)

    package = os.path.join(out, "package")
    shutil.rmtree(package, ignore_errors=True)
    lib = os.path.join(package, "lib", props["TargetFramework"])
    native = os.path.join(package, NATIVE)
    os.makedirs(lib)
    os.makedirs(native)
    shutil.copy(dll, lib)
    shutil.copy(doc, lib)
    if not os.path.exists(os.path.join(build, "libkiln.so")):
        fail("%s/libkiln.so not found: build the kiln target first" % build)
    for name in native_names:
        if os.path.exists(os.path.join(build, name)):
            shutil.copyfile(os.path.join(build, name), os.path.join(native, name))  # follows the symlinks
    deps = "".join('<dependency id="%s" version="%s" />' % p for p in packages)
    nuspec = ('<?xml version="1.0" encoding="utf-8"?>\n'
              '<package xmlns="http://schemas.microsoft.com/packaging/2013/05/nuspec.xsd">\n'
              '  <metadata>\n    <id>%s</id>\n    <version>%s</version>\n    <authors>%s</authors>\n'
              '    <description>%s</description>\n'
              '    <dependencies><group targetFramework=".NETStandard2.0">%s</group></dependencies>\n'
              '  </metadata>\n</package>\n') % (props["PackageId"], version, props["Authors"], props["Description"], deps)
    with open(os.path.join(package, props["PackageId"] + ".nuspec"), "w") as f:
        f.write(nuspec)
    nupkg = os.path.join(out, "%s.%s.nupkg" % (props["PackageId"], version))
    with zipfile.ZipFile(nupkg, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml",
                   '<?xml version="1.0" encoding="utf-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
                   '<Default Extension="nuspec" ContentType="application/octet" /><Default Extension="dll" ContentType="application/octet" />'
                   '<Default Extension="xml" ContentType="application/octet" /><Default Extension="so" ContentType="application/octet" />'
                   '</Types>')
        for d, _, files in os.walk(package):
            for f in sorted(files):
                path = os.path.join(d, f)
                z.write(path, os.path.relpath(path, package))
    print("build.py: %s, %s and %s" % (dll, package, nupkg))


main()
