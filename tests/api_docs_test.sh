#!/usr/bin/env bash
# api_docs_test.sh API_DOCS_SH
#
# Tests api_docs.sh itself on tiny header and api.md pairs: every field of
# a struct documented (exit 0), a field missing from its struct's entry
# (exit 1, printed as `struct.field`), a field written only where it does
# not count (a C++ constructor, a comment, another struct's entry, prose
# outside backticks; exit 1).  Prints "api_docs_test: N cases passed".
# The backticks in single quotes below are Markdown, not command substitution.
# shellcheck disable=SC2016
set -u
set -o pipefail

[ $# -eq 1 ] || { echo "usage: $0 API_DOCS_SH" >&2; exit 2; }
script=$1
[ -f "$script" ] || { echo "api_docs_test: $script not found" >&2; exit 2; }

tmp=$(mktemp -d) || exit 2
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/include/dualrev"

# The header: the forms of members the check reads.
cat > "$tmp/include/dualrev.h" <<'EOF'
#ifndef DUALREV_H
#define DUALREV_H
#include <stddef.h>
#include <stdint.h>

/* A struct; a comment with a ; in it. */
typedef struct ad_box {
    size_t rows, cols;      /* several declarators */
    double arg[2];          /* an array */
    void (*vjp)(void *ctx, size_t n,
                const double *x);   /* a function pointer, on two lines */
    struct {
        double lo, hi;      /* a named nested struct: span.lo, span.hi */
    } span;
    union {
        int ival;           /* an anonymous union: the box's own */
        double dval;
    };
    size_t at;              /* where it is kept (internal) */
    uint64_t recording;     /* which recording it belongs to:
                               (internal) */
    int ad__hidden;
    /* the bridge's scratch space (internal) */
    double *scratch;
#ifdef __cplusplus
    ad_box() = default;
    constexpr ad_box(double c) noexcept : rows(0), cols(0) {}
#endif
} ad_box;

struct ad__private { int secret; };

struct ad_pair {
    int first; /* the first */ int second;
};

int ad_box_area(const ad_box *b);
#endif
EOF

# The entries, complete.
cat > "$tmp/complete.md" <<'EOF'
# API

## Types

### `ad_box`

```c
typedef struct ad_box {
    size_t rows, cols;
    double arg[2];
    void (*vjp)(void *ctx, size_t n, const double *x);
    struct { double lo, hi; } span;
    union { int ival; double dval; };
    ...
} ad_box;
```

#### `ad_box` in C++

Nothing new.

### `ad_pair`

```c
struct ad_pair { int first; ... };
```

The second element is `p.second`.

### `ad_box_area`

The area.
EOF

pass=0
fail=0
check() {  # check NAME WANT_STATUS MD [WANT_LINE...]
    local name=$1 want=$2 md=$3 out status line
    shift 3
    out=$(bash "$script" "$tmp/include" "$md" 2>&1)
    status=$?
    if [ "$status" -ne "$want" ]; then
        echo "api_docs_test: $name: exit $status, expected $want; output:" >&2
        printf '%s\n' "$out" >&2
        fail=$((fail + 1))
        return
    fi
    for line in "$@"; do
        if ! grep -qxF -- "$line" <<< "$out"; then
            echo "api_docs_test: $name: no line '$line' in the output:" >&2
            printf '%s\n' "$out" >&2
            fail=$((fail + 1))
            return
        fi
    done
    pass=$((pass + 1))
}

# sed_md NAME SED_SCRIPT: a variant of complete.md.
sed_md() {
    sed "$2" "$tmp/complete.md" > "$tmp/$1.md"
}

check complete 0 "$tmp/complete.md" \
    "api_docs: 2 names, 11 fields, all documented"

# A field left out of the struct's code block.
sed_md no_cols 's/size_t rows, cols;/size_t rows;/'
check no_cols 1 "$tmp/no_cols.md" '`ad_box.cols`'

# A nested field, an anonymous member's field, a function pointer.
sed_md no_hi 's/double lo, hi;/double lo;/'
check no_hi 1 "$tmp/no_hi.md" '`ad_box.span.hi`'
sed_md no_dval 's/int ival; double dval;/int ival;/'
check no_dval 1 "$tmp/no_dval.md" '`ad_box.dval`'
sed_md no_vjp '/void (\*vjp)/d'
check no_vjp 1 "$tmp/no_vjp.md" '`ad_box.vjp`'

# Written where it does not count: a comment, a C++ constructor's
# parameter, prose without backticks, another struct's entry.
sed_md comment 's/double arg\[2\];/\/* double arg[2]; *\//'
check comment 1 "$tmp/comment.md" '`ad_box.arg`'
sed_md constructor 's/double arg\[2\];/ad_box(double arg) noexcept;/'
check constructor 1 "$tmp/constructor.md" '`ad_box.arg`'
sed_md plain_prose 's/`p.second`/p.second/'
check plain_prose 1 "$tmp/plain_prose.md" '`ad_pair.second`'
sed_md elsewhere 's/`p.second`/p.second/; s/^Nothing new\.$/Nothing new: `second`./'
check elsewhere 1 "$tmp/elsewhere.md" '`ad_pair.second`'

# Named in backticks in the entry's prose: enough.
sed_md in_prose 's/double arg\[2\];//; s/^Nothing new\.$/Nothing new; `arg[0]` and `b->arg[1]`./'
check in_prose 0 "$tmp/in_prose.md"

# No entry at all: the name and each of its fields.
sed_md no_entry 's/^### `ad_pair`$/### The pair/'
check no_entry 1 "$tmp/no_entry.md" '`ad_pair`' '`ad_pair.first`' '`ad_pair.second`'

if [ "$fail" -gt 0 ]; then
    echo "api_docs_test: $fail of $((pass + fail)) cases failed" >&2
    exit 1
fi
echo "api_docs_test: $pass cases passed"
exit 0
