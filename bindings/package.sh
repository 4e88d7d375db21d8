#!/bin/bash
# Packages the bindings the way each ecosystem installs them, next to a kiln
# installed in PREFIX (cmake --install BUILD_DIR --prefix PREFIX):
#   go      PREFIX/share/kiln/go     a module proxy directory (GOPROXY=file://...)
#   rust    PREFIX/share/kiln/cargo  the crates kiln-sys and kiln as `cargo package`
#                                    made them (*.crate) and unpacked as a directory
#                                    source, the layout `cargo vendor` writes
#   csharp  PREFIX/share/kiln/nuget  Kiln.VERSION.nupkg: a local NuGet feed
# Each binding's README shows how a program uses them.
#   bindings/package.sh BUILD_DIR PREFIX [go] [rust] [csharp]   (default: all three)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 2 ] || { echo "usage: $0 BUILD_DIR PREFIX [go] [rust] [csharp]" >&2; exit 2; }
build=$(cd "$1" && pwd)
mkdir -p "$2"
share=$(cd "$2" && pwd)/share/kiln
shift 2
[ $# -gt 0 ] || set -- go rust csharp

go_package() {
  rm -rf "$share/go"
  python3 "$here/go/proxy.py" "$share/go"
}

rust_package() {
  python3 "$here/rust/package.py" "$build" "$share"
}

csharp_package() {
  local tmp; tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  python3 "$here/csharp/build.py" "$build" "$tmp" >/dev/null
  rm -rf "$share/nuget"
  mkdir -p "$share/nuget"
  cp "$tmp"/*.nupkg "$share/nuget/"
  echo "package.sh: $(cd "$share/nuget" && ls) in $share/nuget"
}

for binding in "$@"; do
  case $binding in
    go | rust | csharp) "${binding}_package" ;;
    *) echo "package.sh: unknown binding '$binding' (go, rust or csharp)" >&2; exit 2 ;;
  esac
done
