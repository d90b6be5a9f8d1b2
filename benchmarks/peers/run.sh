#!/bin/bash
# Builds what is out of date (build.sh), then runs the three harnesses one
# after the other, each pinned to CPU 1, and prints one table.  Our own code;
# the peers are fetched by fetch_peers.sh into PEERS_DIR, not vendored.
#
#   PEERS_DIR   the peers' clones and the build (see fetch_peers.sh, build.sh)
#   DUALREV_LIB / DUALREV_INC   the dualrev build to measure (see build.sh)
#   ADBENCH_DIR ADBench's files (default <repo>/../shared/adbench if it
#               exists, else <repo>/tests/data/adbench)
#   CPU        the CPU to pin to (default 1)
#   BA_NOBS    BA observations per timed call (default 4000)
#   PEERS_ONLY gmm, lstm or ba: one problem only
#   TOOLS      which harnesses, in order (default "dualrev codipack adept")
# The raw output is kept in PEERS_DIR/build/last_run.txt.
set -uo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/peers_env.sh"
"$PEERS_HERE/build.sh" || exit 1

CPU="${CPU:-1}"
TOOLS="${TOOLS:-dualrev codipack adept}"
B="$PEERS_DIR/build"
OUT="$B/last_run.txt"
: > "$OUT"
status=0
for t in $TOOLS; do
    # one timing job at a time: each harness runs alone, to its end
    taskset -c "$CPU" "$B/bench_$t" >> "$OUT" 2>&1 || status=1
done

peer_commit() { git -C "$PEERS_DIR/$1" describe --tags --always HEAD 2>/dev/null || echo '?'; }
# the repository's commit, "+changes" when tracked files differ from it
# (--no-optional-locks: reading only, the index is never rewritten)
repo_commit() {
    local c
    c="$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null)" || { echo '?'; return; }
    [ -n "$(git --no-optional-locks -C "$REPO" status --porcelain --untracked-files=no 2>/dev/null)" ] &&
        c="$c+changes"
    echo "$c"
}
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -m), pinned to CPU $CPU; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# repository $(repo_commit);" \
    "CoDiPack $(peer_commit CoDiPack), Adept-2 $(peer_commit Adept-2); ADBench files: $ADBENCH_DIR"
grep '^#' "$OUT"
grep -E '^(CHECK FAILED|error:)' "$OUT"
echo "# times are CPU ms per call, median of 7 batches of >= 50 ms, plain and AD interleaved in one process"
echo "# ratio = AD / plain; sweep = one reverse sweep of a kept tape (LSTM), sweep/plain likewise"
{
    printf 'problem\ttool\tplain_ms\tAD_ms\tratio\tsweep_ms\tsweep/plain\tcheck\ttape\n'
    # problems in the order gmm, lstm, ba; tools in the order run
    for p in gmm lstm ba; do grep "^ROW"$'\t'"$p" "$OUT" | cut -f2-; done
} | column -t -s $'\t'
exit $status
