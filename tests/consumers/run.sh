#!/usr/bin/env bash
# tests/consumers/run.sh SOURCE_ROOT
# dualrev used from outside its tree, as users use it: the library alone is
# built (no cmocka, no tests) and installed into a temporary prefix, then
# programs are built against it by pkg-config (shared and static), CMake's
# find_package, a meson parent project with dualrev as a subproject, and
# g++ with dualrev.hpp.  Each checks a gradient against its closed form.
# Exits 77 (skipped) when a tool it needs is missing.
set -euo pipefail
src=$(cd "$1" && pwd)
here="$src/tests/consumers"
for tool in meson ninja pkg-config cmake cc c++; do
    command -v "$tool" >/dev/null || { echo "consumers: $tool not found: skipped"; exit 77; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"
step() { echo "== $*"; }

step "library alone: configure, build, install into $prefix"
meson setup "$tmp/build" "$src" --prefix="$prefix" --libdir=lib \
    -Dtests=disabled -Dexamples=disabled -Dbenchmarks=disabled >"$tmp/setup.log"
if grep -qi cmocka "$tmp/setup.log"; then
    echo "FAIL: the library-only build looked for cmocka"; exit 1
fi
ninja -C "$tmp/build" >/dev/null
meson install -C "$tmp/build" >/dev/null
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
export LD_LIBRARY_PATH="$prefix/lib"

step "C, pkg-config, shared library"
# shellcheck disable=SC2046
cc -std=c11 "$here/hello.c" -o "$tmp/hello_pc" $(pkg-config --cflags --libs dualrev)
"$tmp/hello_pc"
# grep reads all of ldd's output: with pipefail, grep -q's early exit can
# kill ldd with SIGPIPE and fail the pipeline although the line was there.
if ldd "$tmp/hello_pc" | grep libdualrev.so >/dev/null; then echo "ok: linked to libdualrev.so"; else
    echo "FAIL: not linked to the shared library"; exit 1; fi

step "C, pkg-config --static, fully static executable"
# shellcheck disable=SC2046
cc -std=c11 -static "$here/hello.c" -o "$tmp/hello_pc_static" $(pkg-config --static --cflags --libs dualrev)
"$tmp/hello_pc_static"

step "CMake, find_package(dualrev 0.2)"
mkdir -p "$tmp/cmake"
cp "$here/cmake/CMakeLists.txt" "$here/hello.c" "$tmp/cmake/"
cmake -S "$tmp/cmake" -B "$tmp/cmake/build" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$tmp/cmake/build" >/dev/null
"$tmp/cmake/build/hello_shared"
"$tmp/cmake/build/hello_static"
step "CMake, find_package(dualrev 1.0) is refused"
sed 's/find_package(dualrev 0.2 REQUIRED)/find_package(dualrev 1.0 REQUIRED)/' \
    "$here/cmake/CMakeLists.txt" >"$tmp/cmake/CMakeLists.txt"
if cmake -S "$tmp/cmake" -B "$tmp/cmake/build1" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null 2>&1; then
    echo "FAIL: version 1.0 was accepted"; exit 1; fi
echo "ok"

step "meson parent project, dualrev in subprojects/"
mkdir -p "$tmp/parent/subprojects/dualrev"
cp "$here/meson/meson.build" "$here/hello.c" "$tmp/parent/"
# The tree as git sees it (tracked and new files), without build directories.
(cd "$src" && git ls-files -co --exclude-standard 2>/dev/null || find . -path ./build\* -prune -o -type f -print) |
    grep -v '^\./build' | tar -C "$src" -cf - -T - | tar -C "$tmp/parent/subprojects/dualrev" -xf -
meson setup "$tmp/parent/build" "$tmp/parent" --force-fallback-for=dualrev >"$tmp/parent.log"
grep -q "Executing subproject dualrev" "$tmp/parent.log" || { echo "FAIL: subproject not used"; exit 1; }
ninja -C "$tmp/parent/build" >/dev/null
if ninja -C "$tmp/parent/build" -t targets all | grep -Eq 'test_|examples/|benchmarks/'; then
    echo "FAIL: the subproject built tests, examples or benchmarks"; exit 1; fi
"$tmp/parent/build/hello"

step "C++, dualrev.hpp via pkg-config"
# shellcheck disable=SC2046
c++ -std=c++17 "$here/hello.cpp" -o "$tmp/hello_cpp" $(pkg-config --cflags --libs dualrev)
"$tmp/hello_cpp"

echo "consumers: all ok"
