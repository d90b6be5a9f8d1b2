#!/usr/bin/env bash
# dualrev quick start: ./dev.sh example | test | sanitize | warnings | bench
# Installs the Debian packages a step needs (as root, with apt-get) before it runs.
set -euo pipefail
cd "$(dirname "$0")"

BASE_PKGS="gcc libc6-dev pkg-config meson ninja-build libcmocka-dev uthash-dev liblbfgs-dev"

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
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

configure() {  # configure DIR [meson options...]
    local dir=$1; shift
    if [ -f "$dir/build.ninja" ]; then
        meson setup --reconfigure "$dir" "$@" >/dev/null
    else
        meson setup "$dir" "$@" >/dev/null
    fi
    ninja -C "$dir"
}

case "${1:-}" in
example)
    need $BASE_PKGS
    configure build
    ./build/examples/lbfgs_logistic
    ;;
test)
    need $BASE_PKGS
    configure build
    meson test -C build --print-errorlogs
    ;;
sanitize)
    need $BASE_PKGS
    configure build-san -Dbuildtype=debug -Db_sanitize=address,undefined \
        -Db_lundef=false -Dc_args=-fno-sanitize-recover=all
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
        meson test -C build-san --print-errorlogs
    ;;
warnings)
    need $BASE_PKGS clang
    CC=gcc configure build-gcc-werror -Dwerror=true
    CC=clang configure build-clang-werror -Dwerror=true
    # The benchmarks are not built by default; build them here too.
    ninja -C build-gcc-werror benchmarks/dualrev-bench benchmarks/ba-bench benchmarks/gmm-bench
    ninja -C build-clang-werror benchmarks/dualrev-bench benchmarks/ba-bench benchmarks/gmm-bench
    ;;
bench)
    need $BASE_PKGS g++ libadolc-dev gnuplot-nox
    configure build
    BUILD_DIR=build ./benchmarks/run.sh
    ;;
*)
    echo "usage: $0 example|test|sanitize|warnings|bench" >&2
    exit 2
    ;;
esac
