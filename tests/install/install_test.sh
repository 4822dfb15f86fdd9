#!/usr/bin/env bash
# The installed gradwire, as a user of it sees it: `cmake --install` into a fresh prefix
# holds the public headers only, `gradwire --version` answers, and examples/ builds as a
# project of its own with find_package(gradwire). Its mnist_distributed, run for a few
# hundred samples on 2 ranks by the installed `gradwire run`, prints the same accuracy as
# the build tree's (the same program and library; the arithmetic is deterministic).
# Usage: install_test.sh BUILD_DIR SOURCE_DIR VERSION
set -euo pipefail
build=$(realpath "$1") source=$(realpath "$2") version=$3
work=$(mktemp -d /tmp/gradwire-install-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "install_test: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
prefix=$work/prefix
for f in bin/gradwire include/gradwire/gradwire.h include/gradwire/version.h \
         include/gradwire/fashion_mnist.h lib/libgradwire.a lib/libgradwire_base.a \
         lib/cmake/gradwire/gradwireConfig.cmake lib/cmake/gradwire/gradwireConfigVersion.cmake \
         lib/cmake/gradwire/gradwireTargets.cmake; do
  [ -e "$prefix/$f" ] || fail "$f is not installed"
done
# Private headers stay private: include/gradwire holds only the public ones.
extra=$(find "$prefix/include" -mindepth 2 -type d)
[ -z "$extra" ] || fail "private header directories installed: $extra"
# Nothing in the exported targets points into the source or build tree.
if grep -q -e "$source" -e "$build" "$prefix"/lib/cmake/gradwire/*.cmake; then
  fail "the installed CMake package refers to the source or build tree"
fi
[ "$("$prefix/bin/gradwire" --version)" = "gradwire $version" ] ||
  fail "gradwire --version says '$("$prefix/bin/gradwire" --version)', not 'gradwire $version'"

# The Python module: installed where /usr/bin/python3 finds it under the prefix, it imports
# and says the C++ version.
pydir=$prefix/lib/python3.$(/usr/bin/python3 -c 'import sys; print(sys.version_info[1])')/dist-packages
if [ -d "$build/python/gradwire" ]; then
  [ -e "$pydir/gradwire/__init__.py" ] || fail "the Python module is not installed in $pydir"
  got=$(cd / && PYTHONPATH=$pydir /usr/bin/python3 -c 'import gradwire; print(gradwire.__version__)') ||
    fail "the installed Python module does not import"
  [ "$got" = "$version" ] || fail "the installed Python module says $got, not $version"
fi

launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$source/examples" -B "$work/examples" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" "${launcher[@]}" > "$work/configure.log" ||
  { cat "$work/configure.log"; fail "examples/ does not configure against the installed package"; }
cmake --build "$work/examples" --target mnist_distributed -j 2 > "$work/build.log" ||
  { tail -50 "$work/build.log"; fail "examples/ does not build against the installed package"; }

run() {  # run EXAMPLE_BINARY: the accuracy line of a 2-rank, 512-sample epoch
  timeout -k 5 180 "$prefix/bin/gradwire" run -n 2 -- "$1" 1 512 | grep "test accuracy"
}
installed=$(run "$work/examples/mnist_distributed")
in_tree=$(run "$build/mnist_distributed")
echo "installed example: $installed"
echo "build tree example: $in_tree"
[ -n "$installed" ] || fail "the installed example printed no accuracy"
[ "$installed" = "$in_tree" ] || fail "installed and build-tree examples differ"
echo "install_test: ok"
