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
python=$(ls "$work"/python3-gradwire_"$version"_*.deb) || fail "no python3-gradwire_$version package"

contains() {  # contains DEB PATH...
  local deb=$1; shift
  dpkg-deb -c "$deb" | awk '{print $6}' > "$work/list"
  for path in "$@"; do grep -qx "./$path" "$work/list" || fail "$(basename "$deb") lacks /$path"; done
}
contains "$runtime" usr/bin/gradwire usr/libexec/gradwire/ddp_peer.py \
  usr/libexec/gradwire/peer_jobs.py usr/libexec/gradwire/local_updates.py \
  usr/libexec/gradwire/bucket_order.py
contains "$dev" usr/include/gradwire/gradwire.h usr/include/gradwire/version.h \
  usr/lib/libgradwire.a usr/lib/cmake/gradwire/gradwireConfig.cmake \
  usr/share/doc/gradwire/examples/CMakeLists.txt
pydir=usr/lib/python3.$(/usr/bin/python3 -c 'import sys; print(sys.version_info[1])')/dist-packages/gradwire
contains "$python" "$pydir/__init__.py" "$pydir/ddp.py" "$pydir/diloco.py"
dpkg-deb -c "$python" | awk '{print $6}' | grep -q "^./$pydir/_C\.cpython-.*\.so$" ||
  fail "python3-gradwire lacks the extension module"
# Installed as dpkg would, into a scratch root: the package imports and says its version.
dpkg-deb -x "$python" "$work/root"
got=$(PYTHONPATH="$work/root/$(dirname "$pydir")" /usr/bin/python3 -c 'import gradwire; print(gradwire.__version__)') ||
  fail "the packaged module does not import"
[ "$got" = "$version" ] || fail "the packaged module says version $got, not $version"
if dpkg-deb -c "$dev" | awk '{print $6}' | grep -q '^./usr/include/gradwire/.*/'; then
  fail "libgradwire-dev ships private headers"
fi

depends() { dpkg-deb -f "$1" Depends; }
depends "$runtime" | grep -q libtorch || fail "gradwire does not depend on libtorch: $(depends "$runtime")"
depends "$dev" | grep -q "gradwire (= $version)" || fail "libgradwire-dev does not depend on gradwire $version"
depends "$python" | grep -q "python3-torch" || fail "python3-gradwire does not depend on python3-torch: $(depends "$python")"
for deb in "$runtime" "$dev" "$python"; do
  for dep in $(depends "$deb" | tr ',' '\n' | sed 's/(.*)//; s/|.*//' | tr -d ' '); do
    [ "$dep" = gradwire ] && continue
    dpkg-query -W -f='${Status}' "$dep" 2> /dev/null | grep -q "install ok installed" ||
      fail "$(basename "$deb") depends on $dep, which is not an installed Debian package here"
  done
done
echo "gradwire: $(depends "$runtime")"
echo "libgradwire-dev: $(depends "$dev")"
echo "python3-gradwire: $(depends "$python")"
echo "deb_test: ok"
