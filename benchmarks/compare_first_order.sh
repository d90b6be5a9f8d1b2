#!/usr/bin/env bash
# First-order gradients, before and after: the library of the working tree
# against the library of an earlier commit, on the same benchmark driver.
#
#   benchmarks/compare_first_order.sh [--rev REV] [--runs N] [--pairs N] [--no-time]
#                                     [--no-pairs] [--no-callgrind]
#                                     [-- dualrev-bench options, e.g. --max-n 100000]
#
# REV (default HEAD) is checked out in a temporary git worktree and its
# library built with meson (release, the project's default).  The working
# tree's library comes from BUILD_DIR (default build, set up if missing).
# Both libraries are copied aside, so that a rebuild during the runs cannot
# change them.  The driver is REV's dualrev-bench (its gradient sections:
# the Table 1 programs, t_bad, memory and targets, without ADOL-C) compiled
# twice with the same flags: once with REV's headers and library, once with
# the working tree's.  The recording kernel is inlined from the headers, so
# each binary records with its own kernel; only the library and its headers
# differ between the two.
#
# Timing: N rounds (5), each running both binaries one after the other, the
# order alternating (before/after, then after/before); prints, per row, the
# median over the rounds of each run's median, the spread (lowest-highest)
# and after/before.
# Paired rounds: the workloads of the instruction counts below, plus t_bad
# n = 1e7 and dot n = 1e6, each a short run (~0.1 s) of
# N gradients timed inside the process, before and after in turn, the order
# alternating, 21 rounds (--pairs); prints the median time of each side and
# the median and middle half of the rounds' after/before ratios, which
# cancel the machine's slow changes of load better than long runs do.
# Instructions: callgrind counts the instructions of a fixed workload, N
# gradients after one warm-up, inside one function (--toggle-collect): 10 of
# t_bad n = 1e5, dot n = 1e4, sum-mat-vec n = 1e4 and both with ad_dot, and
# 10^4 of scalar mult and rotate_vec_by_quat (where the fixed cost of a call
# shows); these counts do not depend on the machine's load.
#
# Everything goes to a temporary directory, removed at the end with the
# worktree (KEEP=1 keeps it and prints where it is).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(git -C "$here" rev-parse --show-toplevel)
rev=HEAD
runs=5
do_time=1
do_cg=1
do_pairs=1
pairs=21
bench_args=()
while [ $# -gt 0 ]; do
    case "$1" in
    --rev) rev=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --no-time) do_time=0; shift ;;
    --no-callgrind) do_cg=0; shift ;;
    --no-pairs) do_pairs=0; shift ;;
    --pairs) pairs=$2; shift 2 ;;
    --) shift; bench_args=("$@"); break ;;
    *) sed -n '2,9p' "$0" >&2; exit 2 ;;
    esac
done
build=${BUILD_DIR:-$root/build}
case "$build" in /*) ;; *) build=$root/$build ;; esac
cc=${CC:-cc}
cflags="-std=c11 -O3 -DNDEBUG -D_FILE_OFFSET_BITS=64 -pthread"  # meson's release flags

work=$(mktemp -d "${TMPDIR:-/tmp}/dualrev-cmp.XXXXXX")
cleanup() {
    git -C "$root" worktree remove --force "$work/before" 2>/dev/null || true
    if [ "${KEEP:-0}" = 1 ]; then
        echo "kept: $work"
    else
        rm -rf "$work"
    fi
}
trap cleanup EXIT

rev_id=$(git -C "$root" rev-parse --short "$rev")
echo "before: $rev ($rev_id: $(git -C "$root" log -1 --format=%s "$rev"))"
echo "after:  the working tree $root ($(git -C "$root" status --porcelain -- lib include | wc -l) changed or new files in lib/ and include/)"
git -C "$root" worktree add --detach "$work/before" "$rev" >/dev/null 2>&1

# The shared library of a configured build directory, copied to $2 under
# its soname.
build_lib() {
    local dir=$1 dest=$2 target
    target=$(ninja -C "$dir" -t targets all | sed -n 's/^\(libdualrev\.so[.0-9]*\): c_LINKER.*/\1/p')
    ninja -C "$dir" "$target" >/dev/null
    mkdir -p "$dest"
    local soname
    soname=$(readelf -d "$dir/$target" | sed -n 's/.*SONAME.*\[\(.*\)\].*/\1/p')
    cp "$dir/$target" "$dest/$soname"
    echo "$dest/$soname"
}

meson setup "$work/build-before" "$work/before" >/dev/null
[ -f "$build/build.ninja" ] || meson setup "$build" "$root" >/dev/null
lib_before=$(build_lib "$work/build-before" "$work/lib-before")
lib_after=$(build_lib "$build" "$work/lib-after")

# The driver: REV's dualrev-bench sources, the peer replaced by the stub.
drv=$work/before/benchmarks
srcs=()
for f in $(sed -n '/^bench_sources = files(/,/^)/p' "$drv/meson.build" | grep -o "'[^']*\.c'" | tr -d "'"); do
    srcs+=("$drv/$f")
done
srcs+=("$drv/peer_none.c")

# The callgrind workload: gradients of one program from programs.c.
cat >"$work/workload.c" <<'EOF'
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gmm.h"
#include "programs.h"

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Counted by callgrind (--toggle-collect=workload): reps gradients. */
__attribute__((noinline)) void workload(bench_prog p, size_t n, size_t inputs, const double *x,
                                        double *g, int reps)
{
    double fx;
    for (int i = 0; i < reps; i++)
        if (ad_gradient(prog_objective(p), &n, inputs, x, &fx, g) != AD_OK)
            exit(1);
}

/* GMM natural (the scalar source): recording is counted inside
 * gmm_objective_ad, the whole gradient inside workload_gmm. */
__attribute__((noinline)) void workload_gmm(gmm_problem *p, gmm_work *w, const double *x,
                                            double *g, int reps)
{
    double fx;
    for (int i = 0; i < reps; i++)
        if (gmm_gradient(GMM_SCALAR, p, w, 0, x, &fx, g, NULL) != AD_OK)
            exit(1);
}

/* A kmeans-like objective written as a user writes it: where GCC does
 * not inline the operations (-O2), a change to their cold path shows. */
enum { KM_K = 10, KM_D = 8, KM_P = 1000 };
static double km_x[KM_P][KM_D];

static ad_real kmeans_cost(const ad_real *c, size_t n, void *ctx)
{
    ad_real total = ad_const(0.0);
    (void)n, (void)ctx;
    for (int i = 0; i < KM_P; i++) {
        ad_real best = ad_const(1e300);
        for (int k = 0; k < KM_K; k++) {
            ad_real dist = ad_const(0.0);
            for (int j = 0; j < KM_D; j++) {
                ad_real t = ad_sub(km_x[i][j], c[k * KM_D + j]);
                dist = ad_add(dist, ad_mul(t, t));
            }
            best = ad_fmin(best, dist);
        }
        total = ad_add(total, best);
    }
    return total;
}

__attribute__((noinline)) void workload_kmeans(const double *c, double *g, int reps)
{
    double fx;
    for (int i = 0; i < reps; i++)
        if (ad_gradient(kmeans_cost, NULL, KM_K * KM_D, c, &fx, g) != AD_OK)
            exit(1);
}

static int main_kmeans(int reps)
{
    double c[KM_K * KM_D], g[KM_K * KM_D];
    unsigned long s = 1;
    for (int i = 0; i < KM_P; i++)
        for (int j = 0; j < KM_D; j++) {
            s = s * 6364136223846793005UL + 1442695040888963407UL;
            km_x[i][j] = (double)(s >> 11) / 9007199254740992.0;
        }
    for (int i = 0; i < KM_K * KM_D; i++)
        c[i] = km_x[i / KM_D][i % KM_D];
    workload_kmeans(c, g, 1);  /* the warm-up */
    double t0 = now_ns();
    workload_kmeans(c, g, reps);
    double ns = (now_ns() - t0) / reps;
    ad_tape_stats st;
    ad_tape_stats_get(&st);
    printf("%zu %.6g\n", st.records, ns);
    return 0;
}

static int main_gmm(const char *path, int reps)
{
    gmm_problem p;
    gmm_work w;
    char err[GMM_ERR_SIZE];
    if (gmm_load(path, &p, err) || gmm_work_init(&w, &p)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    size_t inputs = gmm_inputs(&p);
    double *x = malloc(inputs * sizeof *x), *g = malloc(inputs * sizeof *g);
    gmm_pack(&p, x);
    workload_gmm(&p, &w, x, g, 1);  /* the warm-up */
    double t0 = now_ns();
    workload_gmm(&p, &w, x, g, reps);
    double ns = (now_ns() - t0) / reps;
    ad_tape_stats st;
    ad_tape_stats_get(&st);
    printf("%zu %.6g\n", st.records, ns);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "gmm"))
        return main_gmm(argv[2], atoi(argv[3]));
    if (argc == 3 && !strcmp(argv[1], "kmeans"))
        return main_kmeans(atoi(argv[2]));
    static const struct { const char *name; bench_prog p; } names[] = {
        {"tbad", PROG_T_BAD}, {"dot", PROG_DOT}, {"smv", PROG_SUM_MAT_VEC},
        {"dot_array", PROG_DOT_ARRAY}, {"smv_array", PROG_SUM_MAT_VEC_ARRAY},
        {"scalar_mult", PROG_SCALAR_MULT}, {"rotate", PROG_ROTATE}};
    if (argc != 4)
        return 2;
    bench_prog p = PROG_COUNT;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(argv[1], names[i].name))
            p = names[i].p;
    size_t n = (size_t)atol(argv[2]), inputs = prog_inputs(p, n);
    int reps = atoi(argv[3]);
    if (p == PROG_COUNT)
        return 2;
    double *x = malloc(inputs * sizeof *x), *g = malloc(inputs * sizeof *g), fx;
    prog_fill_inputs(p, x, inputs);
    /* the warm-up: the tape's memory is touched for the first time */
    if (ad_gradient(prog_objective(p), &n, inputs, x, &fx, g) != AD_OK)
        return 1;
    double t0 = now_ns();
    workload(p, n, inputs, x, g, reps);
    double ns = (now_ns() - t0) / reps;
    ad_tape_stats st;
    ad_tape_stats_get(&st);
    printf("%zu %.6g\n", st.records, ns);  /* records, ns per gradient */
    return 0;
}
EOF

for side in before after; do
    if [ $side = before ]; then inc=$work/before/include lib=$lib_before; else inc=$root/include lib=$lib_after; fi
    rpath=$(dirname "$lib")
    $cc $cflags -I"$drv" -I"$inc" -o "$work/bench-$side" "${srcs[@]}" "$lib" -Wl,-rpath,"$rpath" -lm
    # GMM's source is the working tree's on both sides, with the reader under
    # its loader (adbench/, no dualrev header): only the library differs.
    # Twice: as meson builds it, and at -O2, where GCC's inlining of the
    # operations follows other limits, so a change to an operation's cold
    # path can cost there what it does not at -O3.
    for o in "" -O2; do
        $cc $cflags $o -g -I"$drv" -I"$root/benchmarks/gmm" -I"$root/benchmarks/adbench" -I"$inc" \
            -o "$work/workload-$side$o" "$work/workload.c" "$drv/programs.c" \
            "$root/benchmarks/gmm/gmm.c" "$root/benchmarks/adbench/reader.c" "$lib" \
            -Wl,-rpath,"$rpath" -lm
    done
done
echo "driver: $rev_id's dualrev-bench (no ADOL-C), $cc $cflags"
echo

if [ $do_time = 1 ]; then
    echo "== timing: $runs rounds, alternating order; dualrev-bench ${bench_args[*]:-} =="
    for i in $(seq 1 "$runs"); do
        if [ $((i % 2)) = 1 ]; then order="before after"; else order="after before"; fi
        for side in $order; do
            out=$work/runs/$side.$i
            mkdir -p "$out"
            t0=$(date +%s)
            st=0
            "$work/bench-$side" --out "$out" "${bench_args[@]}" >"$out/table.txt" 2>&1 || st=$?
            echo "round $i: $side $(($(date +%s) - t0)) s$([ $st = 0 ] || echo ", EXIT STATUS $st")"
        done
    done
    python3 - "$work/runs" "$runs" <<'EOF'
import csv, statistics, sys
runs_dir, runs = sys.argv[1], int(sys.argv[2])

def rows(side, name, key, value):
    out = {}
    for i in range(1, runs + 1):
        with open(f"{runs_dir}/{side}.{i}/{name}") as f:
            for r in csv.DictReader(f, delimiter="\t"):
                k = key(r)
                out.setdefault(k, []).append(float(r[value]))
                if r["check"] != "ok":
                    print(f"  {side} round {i} {k}: check {r['check']}")
    return out

def fmt(ns, per_op):
    if per_op:
        return f"{ns:.2f} ns"
    for unit in ("ns", "us", "ms", "s"):
        if ns < 1000 or unit == "s":
            return f"{ns:.3g} {unit}"
        ns /= 1000

tables = [("programs.tsv", lambda r: f"{r['program']} n={r['n']}", "dualrev_ns", False,
           "ad_gradient, median time per call"),
          ("tbad.tsv", lambda r: f"t_bad n={r['n']}", "dualrev_ns_per_op", True,
           "t_bad, ns per operation")]
for name, key, value, per_op, title in tables:
    before, after = rows("before", name, key, value), rows("after", name, key, value)
    print(f"\n{title}: median over {runs} runs (lowest-highest run)")
    print(f"{'row':<30} {'before':>10} {'(range)':>21} {'after':>10} {'(range)':>21} {'after/before':>12}")
    for k in before:
        b, a = before[k], after.get(k, [float("nan")])
        mb, ma = statistics.median(b), statistics.median(a)
        print(f"{k:<30} {fmt(mb, per_op):>10} {fmt(min(b), per_op) + '-' + fmt(max(b), per_op):>21}"
              f" {fmt(ma, per_op):>10} {fmt(min(a), per_op) + '-' + fmt(max(a), per_op):>21}"
              f" {ma / mb:>12.3f}")
EOF
    echo
fi

if [ $do_pairs = 1 ]; then
    # Short runs of one workload each (about 0.1 s), before and after in
    # turn, the order alternating: a slow phase of the machine then hits
    # both sides of a round, and the round's ratio after/before cancels it.
    echo "== paired rounds: $pairs rounds of one short run per side, order alternating =="
    echo "   (ad_gradient of one program, repeated N times after one warm-up; time per gradient)"
    printf '%-22s %8s | %10s %10s | %12s %16s\n' "workload" "N" "before" "after" \
        "after/before" "(middle half)"
    for w in "tbad 100000 80" "tbad 10000000 2" "dot 10000 700" "dot 1000000 4" \
        "smv 10000 800" "dot_array 10000 1600" "smv_array 10000 2000" \
        "scalar_mult 1 1500000" "rotate 1 400000"; do
        set -- $w
        for i in $(seq 1 "$pairs"); do
            if [ $((i % 2)) = 1 ]; then order="before after"; else order="after before"; fi
            for side in $order; do
                out=$("$work/workload-$side" "$1" "$2" "$3")
                echo "$side ${out#* }"
            done
        done | awk -v w="$1 n=$2" -v reps="$3" '
            function med(a, k,   i, j, t) {  # sorts a[1..k]; returns its median
                for (i = 2; i <= k; i++)
                    for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
                return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
            }
            function fmt(ns) {
                return ns < 1e3 ? sprintf("%.1f ns", ns) : ns < 1e6 ? sprintf("%.3g us", ns / 1e3) : sprintf("%.3g ms", ns / 1e6)
            }
            $1 == "before" { b[++nb] = $2 } $1 == "after" { a[++na] = $2 }
            END {
                for (i = 1; i <= nb; i++) r[i] = a[i] / b[i]
                mb = med(b, nb); ma = med(a, na); mr = med(r, nb)
                printf "%-22s %8d | %10s %10s | %12.3f %7.3f-%-8.3f\n", w, reps, fmt(mb), fmt(ma), mr,
                       r[int(nb / 4) + 1], r[nb - int(nb / 4)]
            }'
    done
    echo
fi

if [ $do_cg = 1 ]; then
    if ! command -v valgrind >/dev/null; then
        echo "valgrind not found: no instruction counts" >&2
        exit 1
    fi
    echo "== instructions (callgrind): N gradients after one warm-up, counted inside workload() =="
    printf '%-22s %6s %8s | %14s %14s | %9s %9s | %9s %9s | %12s\n' "workload" "N" "records" \
        "Ir before" "Ir after" "Ir/grad b" "Ir/grad a" "Ir/rec b" "Ir/rec a" "after/before"
    for w in "tbad 100000 10" "dot 10000 10" "smv 10000 10" "dot_array 10000 10" \
        "smv_array 10000 10" "scalar_mult 1 10000" "rotate 1 10000"; do
        set -- $w
        declare -A ir=()
        recs=0
        for side in before after; do
            f=$work/cg.$side.$1
            out=$(valgrind --tool=callgrind --toggle-collect=workload \
                --callgrind-out-file="$f" "$work/workload-$side" "$1" "$2" "$3" 2>/dev/null)
            recs=${out%% *}
            ir[$side]=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$f")
        done
        awk -v w="$1 n=$2" -v rec="$recs" -v b="${ir[before]}" -v a="${ir[after]}" -v reps="$3" 'BEGIN {
            printf "%-22s %6d %8d | %14d %14d | %9.1f %9.1f | %9.2f %9.2f | %12.4f\n", w, reps, rec,
                   b, a, b / reps, a / reps, b / (reps * rec), a / (reps * rec), a / b }'
    done
    echo
    # GMM d10 K25 natural (the scalar source, tests/data/adbench): recording
    # alone (inside the objective) and the whole gradient, per record.
    gmm=$root/tests/data/adbench/gmm_1k_d10_K25.txt
    echo "GMM d10 K25 natural, 2 gradients after one warm-up: instructions per record"
    printf '%-22s %8s | %9s %9s | %9s %9s | %9s %9s\n' "" "records" "record b" "record a" \
        "rest b" "rest a" "grad b" "grad a"
    for o in "" -O2; do
        declare -A rec=() all=()
        for side in before after; do
            for what in gmm_objective_ad workload_gmm; do
                f=$work/cg.$side$o.$what
                out=$(valgrind --tool=callgrind --toggle-collect=$what \
                    --callgrind-out-file="$f" "$work/workload-$side$o" gmm "$gmm" 2 2>/dev/null)
                recs=${out%% *}
                n=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$f")
                if [ $what = workload_gmm ]; then all[$side]=$n; else rec[$side]=$n; fi
            done
        done
        awk -v rec="$recs" -v rb="${rec[before]}" -v ra="${rec[after]}" -v ab="${all[before]}" \
            -v aa="${all[after]}" -v name="gmm d10 K25 natural${o:+ $o}" 'BEGIN { n = 2 * rec
            printf "%-22s %8d | %9.2f %9.2f | %9.2f %9.2f | %9.2f %9.2f\n", name, rec,
                   rb / n, ra / n, (ab - rb) / n, (aa - ra) / n, ab / n, aa / n }'
    done
    echo
    echo "kmeans-like gradient (250 k records), 2 after one warm-up: instructions per record"
    for o in "" -O2; do
        declare -A km=()
        for side in before after; do
            f=$work/cg.$side$o.kmeans
            out=$(valgrind --tool=callgrind --toggle-collect=workload_kmeans \
                --callgrind-out-file="$f" "$work/workload-$side$o" kmeans 2 2>/dev/null)
            recs=${out%% *}
            km[$side]=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$f")
        done
        awk -v rec="$recs" -v b="${km[before]}" -v a="${km[after]}" -v name="kmeans-like${o:+ $o}" \
            'BEGIN { n = 2 * rec
            printf "%-22s %8d | %9.2f %9.2f | after/before %.4f\n", name, rec, b / n, a / n, a / b }'
    done
    echo
    echo "where the instructions go (self cost, t_bad n=1e5 and dot n=1e4):"
    for w in tbad dot; do
        for side in before after; do
            echo "-- $w, $side"
            callgrind_annotate "$work/cg.$side.$w" 2>/dev/null |
                sed -n '/^Ir/,$p' | grep -E '^ *[0-9,]+ ' | head -5
        done
    done
fi
