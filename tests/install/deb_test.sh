#!/usr/bin/env bash
# The Debian packages `cpack -G DEB` makes: gradwire (the command, what `gradwire bench`
# runs) and libgradwire-dev (libraries, public headers, the CMake package, the examples).
# Checks their contents and that every package they depend on is a real Debian package
# (each is installed on this machine, which install_deps.sh set up).
# Usage: deb_test.sh BUILD_DIR VERSION
set -euo pipefail
build=$(realpath "$1") version=$2
work=$(mktemp -d /tmp/gradwire-deb-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "deb_test: $*" >&2; exit 1; }

(cd "$build" && cpack -G DEB -B "$work" > "$work/cpack.log") ||
  { cat "$work/cpack.log"; fail "cpack -G DEB failed"; }
runtime=$(ls "$work"/gradwire_"$version"_*.deb) || fail "no gradwire_$version package"
dev=$(ls "$work"/libgradwire-dev_"$version"_*.deb) || fail "no libgradwire-dev_$version package"

contains() {  # contains DEB PATH...
  local deb=$1; shift
  dpkg-deb -c "$deb" | awk '{print $6}' > "$work/list"
  for path in "$@"; do grep -qx "./$path" "$work/list" || fail "$(basename "$deb") lacks /$path"; done
}
contains "$runtime" usr/bin/gradwire usr/libexec/gradwire/ddp_peer.py
contains "$dev" usr/include/gradwire/gradwire.h usr/include/gradwire/version.h \
  usr/lib/libgradwire.a usr/lib/cmake/gradwire/gradwireConfig.cmake \
  usr/share/doc/gradwire/examples/CMakeLists.txt
if dpkg-deb -c "$dev" | awk '{print $6}' | grep -q '^./usr/include/gradwire/.*/'; then
  fail "libgradwire-dev ships private headers"
fi

depends() { dpkg-deb -f "$1" Depends; }
depends "$runtime" | grep -q libtorch || fail "gradwire does not depend on libtorch: $(depends "$runtime")"
depends "$dev" | grep -q "gradwire (= $version)" || fail "libgradwire-dev does not depend on gradwire $version"
for deb in "$runtime" "$dev"; do
  for dep in $(depends "$deb" | tr ',' '\n' | sed 's/(.*)//; s/|.*//' | tr -d ' '); do
    [ "$dep" = gradwire ] && continue
    dpkg-query -W -f='${Status}' "$dep" 2> /dev/null | grep -q "install ok installed" ||
      fail "$(basename "$deb") depends on $dep, which is not an installed Debian package here"
  done
done
echo "gradwire: $(depends "$runtime")"
echo "libgradwire-dev: $(depends "$dev")"
echo "deb_test: ok"
