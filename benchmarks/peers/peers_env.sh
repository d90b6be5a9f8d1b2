# Sourced by fetch_peers.sh, build.sh and run.sh (bash): the locations they
# share, each overridable from the environment.  Our own code; see README.md.
#
#   PEERS_DIR    the peers' git trees and all build output; must lie outside
#                the repository (default <repo>/../dualrev-peers)
#   DUALREV_INC  directory holding dualrev.hpp      (default <repo>/include)
#   DUALREV_LIB  directory holding libdualrev.so    (default <repo>/build)
#   ADBENCH_DIR  ADBench's inputs and references: ADBENCH_DIR, else
#                <repo>/../shared/adbench if it exists, else the repository's
#                tests/data/adbench

PEERS_HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"  # benchmarks/peers
REPO="$(cd "$PEERS_HERE/../.." && pwd)"
PEERS_DIR="${PEERS_DIR:-$REPO/../dualrev-peers}"
DUALREV_INC="${DUALREV_INC:-$REPO/include}"
DUALREV_LIB="${DUALREV_LIB:-$REPO/build}"
if [ -z "${ADBENCH_DIR:-}" ]; then
    if [ -d "$REPO/../shared/adbench" ]; then
        ADBENCH_DIR="$(cd "$REPO/../shared/adbench" && pwd)"
    else
        ADBENCH_DIR="$REPO/tests/data/adbench"
    fi
fi
ADBENCH_DIR="$(realpath -m -- "$ADBENCH_DIR")"
DUALREV_INC="$(realpath -m -- "$DUALREV_INC")"
DUALREV_LIB="$(realpath -m -- "$DUALREV_LIB")"
export ADBENCH_DIR

# PEERS_DIR as an absolute path, refused when inside the repository: peer
# code and build output must never land in it.
PEERS_DIR="$(realpath -m -- "$PEERS_DIR")"
case "$PEERS_DIR/" in
    "$(realpath -- "$REPO")"/*)
        echo "PEERS_DIR=$PEERS_DIR is inside the repository $REPO;" \
            "choose a directory outside it (default: $REPO/../dualrev-peers)" >&2
        exit 1
        ;;
esac
