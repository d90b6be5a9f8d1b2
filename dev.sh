#!/usr/bin/env bash
# dualrev quick start: ./dev.sh example | test | sanitize | warnings | i386 | tsan | fuzz SECONDS [SEED] | bench | instr [REV]
# Installs the Debian packages a step needs (as root, with apt-get) before it runs.
set -euo pipefail
cd "$(dirname "$0")"

BASE_PKGS="gcc libc6-dev pkg-config meson ninja-build libcmocka-dev uthash-dev liblbfgs-dev libgsl-dev libnlopt-dev coinor-libipopt-dev libsuitesparse-dev libopenmpi-dev openmpi-bin"
# The consumer tests (tests/consumers) also build with CMake and C++; the
# Eigen test and example (dualrev/eigen.hpp) need Eigen, header-only.
TEST_PKGS="$BASE_PKGS g++ cmake libeigen3-dev"

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

setup() {  # setup DIR [meson options...]
    local dir=$1; shift
    if [ -f "$dir/build.ninja" ]; then
        # meson 1.0's `setup --reconfigure` drops the -D options; `configure`
        # applies them (ninja then regenerates).
        meson configure "$dir" "$@" >/dev/null
    else
        meson setup "$dir" "$@" >/dev/null
    fi
}

configure() {  # configure DIR [meson options...]: set up, then build everything
    setup "$@"
    ninja -C "$1"
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
    setup build
    ninja -C build examples/lbfgs_logistic  # only what it runs
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
    ninja -C build-gcc-werror benchmarks/dualrev-bench benchmarks/ba-bench benchmarks/gmm-bench benchmarks/lstm-bench \
        benchmarks/lanes-bench benchmarks/layout-bench \
        benchmarks/loop-bench benchmarks/sum-bench benchmarks/mlp-bench
    ninja -C build-clang-werror benchmarks/dualrev-bench benchmarks/ba-bench benchmarks/gmm-bench benchmarks/lstm-bench \
        benchmarks/lanes-bench benchmarks/layout-bench \
        benchmarks/loop-bench benchmarks/sum-bench benchmarks/mlp-bench
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
fuzz)
    # The differential fuzzer for SECONDS (default 60) from SEED (default:
    # the clock, printed): the seed and a shrunk program of each failure.
    need $BASE_PKGS
    configure build -Dtests=enabled
    tests/fuzz/long_run.sh "${2:-60}" "${3:-$(date +%s)}" build
    ;;
tsan)
    # ThreadSanitizer over every test that starts threads, built by clang:
    # nothing else in CI runs the tests compiled by clang (gcc 12's TSan
    # runs them as well).  What crashes TSan, gcc's and clang's alike, is
    # C11 thrd_create, which glibc 2.34+ runs without the pthread_create
    # TSan intercepts: the tests start their threads with pthreads.
    need $TEST_PKGS clang
    # A deliberate race must be reported, or TSan cannot run here: LLVM 14's
    # runtime crashes at start with vm.mmap_rnd_bits above 28 (the default
    # of some kernels; checked with 32).  Then try without address
    # randomisation (setarch -R, which works there), else fail.
    probe=$(mktemp -d)
    trap 'rm -rf "$probe"' EXIT
    printf '%s\n' '#include <pthread.h>' 'static int n;' \
        'static void *bump(void *p) { (void)p; n++; return p; }' \
        'int main(void) { pthread_t t; pthread_create(&t, 0, bump, 0); n++; pthread_join(t, 0); return 0; }' \
        >"$probe/race.c"
    clang -fsanitize=thread -g "$probe/race.c" -o "$probe/race"
    reports_race() { { "$@" "$probe/race" 2>&1 || true; } | grep -q "WARNING: ThreadSanitizer: data race"; }
    run=()
    if ! reports_race; then
        run=(setarch "$(uname -m)" -R)
        if ! reports_race "${run[@]}"; then
            echo "dev.sh: ThreadSanitizer does not work on this machine, even under setarch -R:" >&2
            { "${run[@]}" "$probe/race" 2>&1 || true; } | head -5 >&2
            echo "dev.sh: vm.mmap_rnd_bits is $(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null) (28 or less works)" >&2
            exit 1
        fi
        echo "dev.sh: TSan works only without address randomisation here: tests run under setarch -R"
    fi
    # b_lundef=false: clang links the TSan runtime into executables only, so
    # the shared library has undefined __tsan_* symbols.
    CC=clang CXX=clang++ configure build-tsan -Dtests=enabled -Dexamples=disabled -Dbenchmarks=disabled \
        -Dbuildtype=debugoptimized -Db_sanitize=thread -Db_lundef=false
    expect_option build-tsan b_sanitize thread
    # test_NAME.c(pp) is the test NAME; a name meson does not know fails.
    mapfile -t thread_tests < <(grep -lE 'pthread_create|thrd_create|std::(thread|async|jthread)|"workers\.h"' \
        tests/test_*.c tests/test_*.cpp | sed -E 's|^tests/test_(.*)\.c(pp)?$|\1|')
    [ ${#thread_tests[@]} -gt 0 ] || { echo "dev.sh: no thread tests found" >&2; exit 1; }
    # A directory configured earlier with another compiler keeps it.
    if ! readelf -p .comment build-tsan/tests/test_threads | grep clang >/dev/null; then
        echo "dev.sh: build-tsan was not built by clang: remove it and run again" >&2
        exit 1
    fi
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
        "${run[@]}" meson test -C build-tsan --print-errorlogs --timeout-multiplier 3 "${thread_tests[@]}"
    ;;
bench)
    need $BASE_PKGS g++ libadolc-dev gnuplot-nox
    configure build
    BUILD_DIR=build ./benchmarks/run.sh
    ;;
instr)
    # Instruction counts (callgrind), which load does not disturb: the
    # working tree against REV (default HEAD; 54ce754 is before value tags),
    # including GMM d10 K25 natural's recording instructions per record.
    need $BASE_PKGS valgrind
    configure build
    BUILD_DIR=build ./benchmarks/compare_first_order.sh --rev "${2:-HEAD}" --no-time --no-pairs
    ;;
*)
    echo "usage: $0 example|test|sanitize|warnings|i386|tsan|fuzz SECONDS [SEED]|bench|instr [REV]" >&2
    exit 2
    ;;
esac
