#!/usr/bin/env python3
"""Builds Kiln.dll with mcs as src/Kiln.csproj describes it, and lays it out as
a NuGet package. Debian has mono but no dotnet SDK, so the .csproj cannot be
built here; this script takes its settings from it instead, and fails when the
.csproj says something this build does not do (so the two cannot drift).

mcs compiles against Mono's mscorlib; Retarget.cs (run with Mono's Mono.Cecil)
then makes the assembly reference netstandard 2.1.0.0 alone, as the SDK's
would, failing for any type .NET Standard 2.1 does not hold.

Usage: build.py BUILD_DIR OUT_DIR
  BUILD_DIR  a kiln build tree or an installed lib/ (libkiln.so.ABI, and the
             plugins when built)
  OUT_DIR    gets Kiln.dll, Kiln.xml (XML docs) and package/, the NuGet layout:
             Kiln.nuspec, README.md, lib/netstandard2.1/Kiln.{dll,xml},
             runtimes/linux-x64/native/libkiln.so.ABI and plugins; and
             Kiln.VERSION.nupkg.
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
         "PackageLicenseExpression", "PackageProjectUrl", "RepositoryUrl", "RepositoryType", "PackageTags",
         "PackageReadmeFile", "LangVersion", "AllowUnsafeBlocks", "GenerateDocumentationFile", "TreatWarningsAsErrors",
         "KilnNativeDir"}
CECIL = "Mono.Cecil/0.11.0.0__0738eb9f132ed756/Mono.Cecil.dll"  # mono-devel's (libmono-cecil-private-cil)


def fail(message):
    sys.exit("build.py: " + message)


def read_csproj():
    project = ET.parse(os.path.join(src, "Kiln.csproj")).getroot()
    if project.get("Sdk") != "Microsoft.NET.Sdk":
        fail("Kiln.csproj: an SDK-style project expected")
    props, packages, natives, files = {}, [], [], []
    for group in project.iter("PropertyGroup"):
        for p in group:
            if p.tag not in KNOWN:
                fail("Kiln.csproj sets %s, which build.py does not implement" % p.tag)
            props[p.tag] = (p.text or "").strip()
    for item in project.iter("ItemGroup"):
        for i in item:
            if i.tag == "PackageReference":
                packages.append((i.get("Include"), i.get("Version")))
            elif i.tag == "None" and i.get("Pack") == "true" and i.get("PackagePath") == NATIVE:
                natives.append(i)
            elif i.tag == "None" and i.get("Pack") == "true":
                files.append(i)
            else:
                fail("Kiln.csproj has a <%s> item, which build.py does not implement" % i.tag)
    return props, packages, natives, files


def check(props, packages, natives, files):
    header = open(os.path.join(root, "include/kiln/kiln.h")).read()
    version = ".".join(re.search(r"#define KILN_VERSION_%s (\d+)" % k, header).group(1) for k in ("MAJOR", "MINOR", "PATCH"))
    abi = re.search(r"#define KILN_ABI_VERSION (\d+)", header).group(1)
    want = {"TargetFramework": "netstandard2.1", "AssemblyName": "Kiln", "Version": version, "LangVersion": "7.2",
            "AllowUnsafeBlocks": "true", "GenerateDocumentationFile": "true", "TreatWarningsAsErrors": "true",
            "PackageReadmeFile": "README.md"}
    for key, value in want.items():
        if props.get(key) != value:
            fail("Kiln.csproj: %s is %r, the mcs build uses %r" % (key, props.get(key), value))
    for key in ("PackageLicenseExpression", "RepositoryUrl", "PackageProjectUrl"):
        if not props.get(key):
            fail("Kiln.csproj: %s is not set" % key)
    if packages:
        fail("Kiln.csproj: package references %s; the package has no dependency (netstandard2.1 holds Span)" % packages)
    names = [os.path.basename(n.get("Include")) for n in natives]
    soname = "libkiln.so." + abi
    if not names or names[0] != soname or natives[0].get("Condition"):
        fail("Kiln.csproj: %s (the soname of kiln.h's ABI, which Native.g.cs loads) must be the first native "
             "library, unconditionally" % soname)
    if [(f.get("Include"), f.get("PackagePath")) for f in files] != [("../README.md", "/")]:
        fail("Kiln.csproj: the packed files other than native libraries must be ../README.md at the root")
    return names


def sources():
    # The SDK compiles **/*.cs under the project directory (except bin/ and obj/).
    found = []
    for d, dirs, files in os.walk(src):
        dirs[:] = sorted(x for x in dirs if x not in ("bin", "obj"))
        found += [os.path.join(d, f) for f in sorted(files) if f.endswith(".cs")]
    return found


def retarget(mono_dll, dll, out):
    """mono_dll, compiled against Mono's mscorlib, as dll referencing netstandard 2.1 alone."""
    mono_lib = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(shutil.which("mcs") or "/usr/bin/mcs"))),
                            "lib/mono")
    cecil = os.path.join(mono_lib, "gac", CECIL)
    facade = os.path.join(mono_lib, "4.5/Facades/netstandard.dll")
    if not os.path.exists(cecil) or not os.path.exists(facade):
        fail("Mono.Cecil 0.11 or the netstandard facade not found (%s, %s): install mono-devel" % (cecil, facade))
    tool = os.path.join(out, "Retarget.exe")
    subprocess.run(["mcs", "-nologo", "-warnaserror", "-out:" + tool, "-r:" + cecil, os.path.join(here, "Retarget.cs")],
                   check=True)
    subprocess.run(["mono", tool, mono_dll, dll, facade], check=True, stdout=subprocess.DEVNULL)


def main():
    if len(sys.argv) != 3:
        fail("usage: build.py BUILD_DIR OUT_DIR")
    build, out = (os.path.abspath(a) for a in sys.argv[1:])
    props, packages, natives, files = read_csproj()
    native_names = check(props, packages, natives, files)
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
    os.makedirs(os.path.join(out, "obj"), exist_ok=True)
    mono_dll = os.path.join(out, "obj", "Kiln.dll")  # the name is the assembly's
    subprocess.run(["mcs", "-target:library", "-langversion:" + props["LangVersion"], "-unsafe", "-warnaserror",
                    "-nologo", "-doc:" + doc, "-out:" + mono_dll, info] + sources(), check=True)
    retarget(mono_dll, dll, out)

    package = os.path.join(out, "package")
    shutil.rmtree(package, ignore_errors=True)
    lib = os.path.join(package, "lib", props["TargetFramework"])
    native = os.path.join(package, NATIVE)
    os.makedirs(lib)
    os.makedirs(native)
    shutil.copy(dll, lib)
    shutil.copy(doc, lib)
    if not os.path.exists(os.path.join(build, native_names[0])):
        fail("%s/%s not found: build the kiln target first" % (build, native_names[0]))
    for name in native_names:
        if os.path.exists(os.path.join(build, name)):
            shutil.copyfile(os.path.join(build, name), os.path.join(native, name))  # follows the symlinks
    shutil.copy(os.path.join(here, "README.md"), package)
    # As dotnet pack writes it from the same properties (licenseUrl too, for
    # clients older than the license element).
    nuspec = ('<?xml version="1.0" encoding="utf-8"?>\n'
              '<package xmlns="http://schemas.microsoft.com/packaging/2013/05/nuspec.xsd">\n'
              '  <metadata>\n    <id>{PackageId}</id>\n    <version>{version}</version>\n    <authors>{Authors}</authors>\n'
              '    <license type="expression">{PackageLicenseExpression}</license>\n'
              '    <licenseUrl>https://licenses.nuget.org/{PackageLicenseExpression}</licenseUrl>\n'
              '    <readme>{PackageReadmeFile}</readme>\n'
              '    <projectUrl>{PackageProjectUrl}</projectUrl>\n'
              '    <description>{Description}</description>\n'
              '    <tags>{tags}</tags>\n'
              '    <repository type="{RepositoryType}" url="{RepositoryUrl}" />\n'
              '    <dependencies><group targetFramework=".NETStandard2.1" /></dependencies>\n'
              '  </metadata>\n</package>\n').format(version=version, tags=props.get("PackageTags", "").replace(";", " "),
                                                      **props)
    with open(os.path.join(package, props["PackageId"] + ".nuspec"), "w") as f:
        f.write(nuspec)
    nupkg = os.path.join(out, "%s.%s.nupkg" % (props["PackageId"], version))
    with zipfile.ZipFile(nupkg, "w", zipfile.ZIP_DEFLATED) as z:
        # An Open Packaging Conventions file, as nuget pack writes it: the content
        # types of its parts, and the relationship that names the manifest (NuGet
        # 2.x clients find no package without it).
        extensions = sorted({os.path.splitext(f)[1].lstrip(".") for _, _, fs in os.walk(package) for f in fs} - {""})
        z.writestr("[Content_Types].xml",
                   '<?xml version="1.0" encoding="utf-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
                   '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml" />'
                   + "".join('<Default Extension="%s" ContentType="application/octet" />' % e for e in extensions) +
                   '</Types>')
        z.writestr("_rels/.rels",
                   '<?xml version="1.0" encoding="utf-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
                   '<Relationship Type="http://schemas.microsoft.com/packaging/2010/07/manifest" Target="/%s.nuspec" Id="manifest" />'
                   '</Relationships>' % props["PackageId"])
        for d, _, files in os.walk(package):
            for f in sorted(files):
                path = os.path.join(d, f)
                z.write(path, os.path.relpath(path, package))
    print("build.py: %s, %s and %s" % (dll, package, nupkg))


main()
