#!/usr/bin/env bash
# dualrev quick start: ./dev.sh example | test | sanitize | warnings | i386 | bench
# Installs the Debian packages a step needs (as root, with apt-get) before it runs.
set -euo pipefail
cd "$(dirname "$0")"

BASE_PKGS="gcc libc6-dev pkg-config meson ninja-build libcmocka-dev uthash-dev liblbfgs-dev"
# The consumer tests (tests/consumers) also build with CMake and C++.
TEST_PKGS="$BASE_PKGS g++ cmake"

need() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ]; then
        echo "dev.sh: missing Debian packages: ${missing[*]} (run as root, or apt-get install them)" >&2
        exit 1
    fi
    echo "dev.sh: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || echo "dev.sh: apt-get update reported an error; trying the install"
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

configure() {  # configure DIR [meson options...]
    local dir=$1; shift
    if [ -f "$dir/build.ninja" ]; then
        # meson 1.0's `setup --reconfigure` drops the -D options; `configure`
        # applies them (ninja then regenerates).
        meson configure "$dir" "$@" >/dev/null
    else
        meson setup "$dir" "$@" >/dev/null
    fi
    ninja -C "$dir"
}

expect_option() {  # expect_option DIR NAME VALUE: the build really has it
    local got
    # python3 is there: meson runs on it.
    got=$(meson introspect --buildoptions "$1" | python3 -c \
        'import json, sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"] == sys.argv[1]))' "$2")
    if [ "$got" != "$3" ]; then
        echo "dev.sh: $1 has $2 = '$got', not '$3'" >&2
        exit 1
    fi
}

case "${1:-}" in
example)
    need $BASE_PKGS
    configure build
    ./build/examples/lbfgs_logistic
    ;;
test)
    need $TEST_PKGS
    configure build -Dtests=enabled
    meson test -C build --print-errorlogs
    ;;
sanitize)
    need $TEST_PKGS
    configure build-san -Dbuildtype=debug -Db_sanitize=address,undefined \
        -Db_lundef=false -Dc_args=-fno-sanitize-recover=all -Dcpp_args=-fno-sanitize-recover=all
    expect_option build-san b_sanitize address,undefined
    # The consumer tests build their own unsanitized copy: not run here.
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
        meson test -C build-san --print-errorlogs --no-suite consumers
    ;;
warnings)
    need $TEST_PKGS clang
    CC=gcc CXX=g++ configure build-gcc-werror -Dwerror=true
    CC=clang CXX=clang++ configure build-clang-werror -Dwerror=true
    # The benchmarks are not built by default; build them here too.
    ninja -C build-gcc-werror benchmarks/dualrev-bench benchmarks/ba-bench benchmarks/gmm-bench
    ninja -C build-clang-werror benchmarks/dualrev-bench benchmarks/ba-bench benchmarks/gmm-bench
    ;;
i386)
    # 32-bit x86 with SSE2 arithmetic: the suite, then under the sanitizers
    # (they find misaligned vector accesses that x86 hardware forgives).
    if ! dpkg --print-foreign-architectures | grep -qx i386; then
        [ "$(id -u)" -eq 0 ] || { echo "dev.sh: i386 needs root (dpkg --add-architecture)" >&2; exit 1; }
        dpkg --add-architecture i386
        # An index of the i386 mirror that is mid-sync fails the update;
        # the packages needed come from the main archive all the same.
        apt-get update -qq || echo "dev.sh: apt-get update reported an error; going on"
    fi
    need $BASE_PKGS gcc-multilib g++-multilib libcmocka-dev:i386 liblbfgs-dev:i386
    configure build-i386 --cross-file tests/i386/sse2.ini -Dtests=enabled -Dwerror=true
    meson test -C build-i386 --print-errorlogs --no-suite consumers
    configure build-i386-san --cross-file tests/i386/sse2.ini -Dtests=enabled \
        -Dbuildtype=debug -Db_sanitize=address,undefined -Db_lundef=false \
        -Dc_args=-fno-sanitize-recover=all -Dcpp_args=-fno-sanitize-recover=all
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
        meson test -C build-i386-san --print-errorlogs --no-suite consumers
    ;;
bench)
    need $BASE_PKGS g++ libadolc-dev gnuplot-nox
    configure build
    BUILD_DIR=build ./benchmarks/run.sh
    ;;
*)
    echo "usage: $0 example|test|sanitize|warnings|i386|bench" >&2
    exit 2
    ;;
esac
