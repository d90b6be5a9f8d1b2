#!/bin/bash
# Clones the peers (CoDiPack, Adept-2) into PEERS_DIR, outside the repository,
# and checks out the commits pinned in PEERS_VERSIONS.  Our own code; the
# peers' sources are fetched here, never vendored into the repository.
#
#   PEERS_DIR  where the clones go (default <repo>/../dualrev-peers):
#              PEERS_DIR/CoDiPack, PEERS_DIR/Adept-2
#   MIRROR     clone from local bare mirrors instead of GitHub, laid out as
#              MIRROR/<owner>+<name>/repo (e.g. MIRROR/SciCompKL+CoDiPack/repo),
#              for a machine without internet access
#
# Run again to move existing clones to the pinned commits (after editing
# PEERS_VERSIONS); a clone with local changes is left alone (error).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/peers_env.sh"
MIRROR="${MIRROR:-}"
mkdir -p "$PEERS_DIR"

while read -r name url commit _; do
    case "$name" in '' | '#'*) continue ;; esac
    if [ -n "$MIRROR" ]; then
        owner_repo="${url#https://github.com/}"
        src="$MIRROR/${owner_repo/\//+}/repo"
        [ -d "$src" ] || { echo "no mirror of $url at $src" >&2; exit 1; }
    else
        src="$url"
    fi
    dir="$PEERS_DIR/$name"
    if [ ! -e "$dir" ]; then
        echo "cloning $src into $dir"
        git clone -q --no-checkout "$src" "$dir"
    elif ! git -C "$dir" rev-parse --git-dir >/dev/null 2>&1 ||
        [ "$(git -C "$dir" rev-parse --show-toplevel)" != "$(realpath "$dir")" ]; then
        echo "$dir exists and is not a git clone: remove it or choose another PEERS_DIR" >&2
        exit 1
    elif [ -n "$(git -C "$dir" status --porcelain)" ]; then
        echo "$dir has local changes: not touching it (git -C $dir status)" >&2
        exit 1
    fi
    if ! git -C "$dir" cat-file -e "$commit^{commit}" 2>/dev/null; then
        echo "fetching $src into $dir"
        git -C "$dir" fetch -q --tags "$src" '+refs/heads/*:refs/remotes/origin/*'
        git -C "$dir" cat-file -e "$commit^{commit}" 2>/dev/null ||
            git -C "$dir" fetch -q "$src" "$commit"
    fi
    git -C "$dir" -c advice.detachedHead=false checkout -q --detach "$commit"
    echo "$name $(git -C "$dir" describe --tags --always HEAD) ($commit) in $dir"
done < "$PEERS_HERE/PEERS_VERSIONS"
