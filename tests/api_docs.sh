#!/usr/bin/env bash
# api_docs.sh INCLUDE_DIR API_MD [SHARED_LIBRARY]
#
# Fails when a public name of dualrev has no entry in docs/api.md.
#
# The public names are those of INCLUDE_DIR/dualrev.h and
# INCLUDE_DIR/dualrev/*.h that start with ad_, AD_ or DUALREV_:
#   1. every name declared with AD_API;
#   2. every macro defined with #define (include guards excepted), and every
#      AD_ macro the headers test with defined() or #ifdef (a switch the
#      user defines, such as AD_ALLOW_FAST_MATH);
#   3. every type named by a typedef or a struct, union or enum tag, and
#      every enumerator of an enum;
#   4. every static inline function, those that a macro generates by token
#      pasting (ad_##name##_rd, ...) included;
#   5. with SHARED_LIBRARY, every dynamic symbol it defines whose name starts
#      with ad_ (nm -D --defined-only).
# Names with a double underscore (ad__push_slow, AD__NARY) are internal and
# skipped.
#
# A name has an entry when it is written in backticks, `name`, in an entry
# heading of API_MD or in the first non-blank line after one.  An entry
# heading is a heading (a line starting with #, outside fenced code) that
# names something in backticks; a name in the prose of other sections does
# not count.  Each name without an entry is printed as `name`; the exit
# status is then 1.  Otherwise the script prints
# "api_docs: N names, all documented" and exits 0.  Usage errors exit 2.
set -u
set -o pipefail

usage() {
    echo "usage: $0 INCLUDE_DIR API_MD [SHARED_LIBRARY]" >&2
    exit 2
}

[ $# -eq 2 ] || [ $# -eq 3 ] || usage
inc=$1
md=$2
lib=${3:-}

[ -f "$inc/dualrev.h" ] || { echo "api_docs: $inc/dualrev.h not found" >&2; exit 2; }
[ -f "$md" ] || { echo "api_docs: $md not found" >&2; exit 2; }

headers=("$inc/dualrev.h")
for h in "$inc"/dualrev/*.h; do
    [ -f "$h" ] && headers+=("$h")
done

# ---- names from the headers ----
#
# Comments are removed and continued lines joined first, so that a
# declaration or a macro is read whole; then each statement is classified.
header_names() {
    awk '
    function ident_before(s, stop,    i, t) {
        # the last identifier in s before the first occurrence of stop
        i = index(s, stop)
        t = i ? substr(s, 1, i - 1) : s
        if (match(t, /[A-Za-z_][A-Za-z0-9_]*[ \t*]*$/)) {
            t = substr(t, RSTART, RLENGTH)
            gsub(/[ \t*]/, "", t)
            return t
        }
        return ""
    }
    function emit(kind, name) {
        if (name != "")
            print kind, name
    }
    # Removes comments from one physical line, keeping track of a comment
    # left open at the end of the line before; string and character
    # literals are copied whole.
    function strip(line,    out, i, c, n, q) {
        out = ""
        n = length(line)
        i = 1
        while (i <= n) {
            if (in_comment) {
                if (substr(line, i, 2) == "*/") { in_comment = 0; i += 2 } else i++
                continue
            }
            c = substr(line, i, 1)
            if (substr(line, i, 2) == "/*") { in_comment = 1; out = out " "; i += 2; continue }
            if (substr(line, i, 2) == "//") break
            if (c == "\"" || c == "\047") {
                q = c
                out = out c
                i++
                while (i <= n && substr(line, i, 1) != q) {
                    if (substr(line, i, 1) == "\\") { out = out substr(line, i, 2); i += 2; continue }
                    out = out substr(line, i, 1)
                    i++
                }
                out = out q
                i++
                continue
            }
            out = out c
            i++
        }
        return out
    }
    # The arguments of a call whose "(" has been read: args[1..].
    function split_args(s,    i, c, d, a, n) {
        delete args
        d = 0
        a = ""
        n = 0
        for (i = 1; i <= length(s); i++) {
            c = substr(s, i, 1)
            if (c == "(") d++
            else if (c == ")") { if (d == 0) break; d-- }
            else if (c == "," && d == 0) { args[++n] = a; a = ""; continue }
            a = a c
        }
        args[++n] = a
    }
    # A preprocessor line.
    function directive(line,    m, body, params, np, k, p, rest) {
        if (match(line, /^[ \t]*#[ \t]*ifndef[ \t]+[A-Za-z_][A-Za-z0-9_]*/)) {
            m = substr(line, RSTART, RLENGTH)
            sub(/.*ifndef[ \t]+/, "", m)
            guard[FILENAME, m] = 1
        }
        # switches the user may define: defined(AD_X), #ifdef AD_X, #ifndef AD_X
        if (line ~ /^[ \t]*#[ \t]*(if|elif)/) {
            rest = line
            while (match(rest, /defined[ \t]*\(?[ \t]*AD_[A-Za-z0-9_]+/)) {
                m = substr(rest, RSTART, RLENGTH)
                sub(/^defined[ \t]*\(?[ \t]*/, "", m)
                emit("switch", m)
                rest = substr(rest, RSTART + RLENGTH)
            }
        }
        if (match(line, /^[ \t]*#[ \t]*ifn?def[ \t]+AD_[A-Za-z0-9_]+/)) {
            m = substr(line, RSTART, RLENGTH)
            sub(/.*[ \t]/, "", m)
            emit("switch", m)
        }
        if (!match(line, /^[ \t]*#[ \t]*define[ \t]+[A-Za-z_][A-Za-z0-9_]*/))
            return
        m = substr(line, RSTART, RLENGTH)
        sub(/.*define[ \t]+/, "", m)
        body = substr(line, RSTART + RLENGTH)
        if ((FILENAME, m) in guard && body ~ /^[ \t]*$/)
            return  # an include guard
        emit("macro", m)
        # A function-like macro that defines static inline functions by
        # token pasting: its name patterns, to expand at its invocations.
        if (substr(body, 1, 1) != "(" || body !~ /static[ \t]+inline/)
            return
        params = substr(body, 2, index(body, ")") - 2)
        gsub(/[ \t]/, "", params)
        np = split(params, plist, ",")
        rest = body
        while (match(rest, /ad_##[A-Za-z_][A-Za-z0-9_]*(##[A-Za-z0-9_]*)?[ \t]*\(/)) {
            p = substr(rest, RSTART, RLENGTH)
            rest = substr(rest, RSTART + RLENGTH)
            sub(/[ \t]*\($/, "", p)
            split(p, parts, "##")  # ad_, param[, suffix]
            for (k = 1; k <= np; k++)
                if (plist[k] == parts[2]) {
                    pattern[m, ++npattern[m]] = k SUBSEP (3 in parts ? parts[3] : "")
                    break
                }
        }
    }
    # A declaration or definition, whole (a function definition: its
    # header, without the body).
    function statement(s,    t, i, body, items, n, k, it) {
        gsub(/[ \t]+/, " ", s)
        if (match(s, /(^| )AD_API /)) {
            t = substr(s, RSTART + RLENGTH)
            emit("api", index(t, "(") ? ident_before(t, "(") : ident_before(t, ";"))
        }
        if (match(s, /(^| )static inline /))
            emit("inline", ident_before(substr(s, RSTART), "("))
        # a tag: struct ad_x { ... }, also without a typedef
        t = s
        while (match(t, /(struct|union|enum) [A-Za-z_][A-Za-z0-9_]* ?\{/)) {
            it = substr(t, RSTART, RLENGTH)
            t = substr(t, RSTART + RLENGTH)
            sub(/^[a-z]+ /, "", it)
            sub(/ ?\{$/, "", it)
            emit("tag", it)
        }
        if (match(s, /(^| )typedef /)) {
            t = substr(s, RSTART)
            if (t ~ /\}/) {
                sub(/^.*\}/, "", t)
                emit("type", ident_before(t, ";"))
            } else if (match(t, /\( ?\* ?[A-Za-z_][A-Za-z0-9_]* ?\)/)) {
                t = substr(t, RSTART, RLENGTH)
                gsub(/[ ()*]/, "", t)
                emit("type", t)
            } else {
                sub(/(\[[^]]*\])+ ?; ?$/, ";", t)
                emit("type", ident_before(t, ";"))
            }
        }
        if (match(s, /(^| )enum [A-Za-z0-9_ ]*\{[^}]*\}/) || match(s, /(^| )enum ?\{[^}]*\}/)) {
            body = substr(s, RSTART, RLENGTH)
            sub(/^[^{]*\{/, "", body)
            sub(/\}$/, "", body)
            n = split(body, items, ",")
            for (k = 1; k <= n; k++)
                if (match(items[k], /[A-Za-z_][A-Za-z0-9_]*/))
                    emit("enumerator", substr(items[k], RSTART, RLENGTH))
        }
    }
    # A logical line of code (not a directive).
    function code(line,    m, k, pp, arg, i, c) {
        # an invocation of a macro that generates functions
        if (depth == 0 && !skip && match(line, /^[ \t]*[A-Za-z_][A-Za-z0-9_]*[ \t]*\(/)) {
            m = substr(line, RSTART, RLENGTH)
            gsub(/[ \t(]/, "", m)
            if (m in npattern) {
                split_args(substr(line, RSTART + RLENGTH))
                for (k = 1; k <= npattern[m]; k++) {
                    split(pattern[m, k], pp, SUBSEP)
                    arg = args[pp[1] + 0]
                    gsub(/^[ \t]+|[ \t]+$/, "", arg)
                    emit("inline", "ad_" arg pp[2])
                }
                return
            }
        }
        for (i = 1; i <= length(line); i++) {
            c = substr(line, i, 1)
            if (skip) {  # a function body
                if (c == "{") depth++
                else if (c == "}" && --depth == 0) { skip = 0; stmt = "" }
                continue
            }
            if (c == "{" && depth == 0 && stmt ~ /\)[ \t]*$/) {
                statement(stmt)
                skip = 1
                depth = 1
                continue
            }
            if (c == "{") depth++
            else if (c == "}") depth--
            if (c == ";" && depth == 0) {
                statement(stmt ";")
                stmt = ""
                continue
            }
            stmt = stmt c
        }
        stmt = stmt " "
    }
    FNR == 1 { in_comment = 0; pending = ""; stmt = ""; depth = 0; skip = 0 }
    {
        line = strip($0)
        if (line ~ /\\[ \t]*$/) {
            sub(/\\[ \t]*$/, "", line)
            pending = pending line " "
            next
        }
        line = pending line
        pending = ""
        if (line ~ /^[ \t]*$/)
            next
        if (line ~ /^[ \t]*#/)
            directive(line)
        else
            code(line)
    }
    ' "${headers[@]}"
}
raw=$(header_names) || { echo "api_docs: could not read the headers" >&2; exit 2; }

if [ -n "$lib" ]; then
    nm=${NM:-nm}
    command -v "$nm" >/dev/null 2>&1 || { echo "api_docs: $nm not found" >&2; exit 2; }
    [ -f "$lib" ] || { echo "api_docs: $lib not found" >&2; exit 2; }
    syms=$("$nm" -D --defined-only "$lib") || { echo "api_docs: $nm -D failed on $lib" >&2; exit 2; }
    raw+=$'\n'$(printf '%s\n' "$syms" | awk 'NF >= 2 && $NF ~ /^ad_/ { print "symbol", $NF }')
fi

# The public names: prefixes ad_, AD_, DUALREV_; no double underscore.
names=$(printf '%s\n' "$raw" | awk 'NF == 2 { print $2 }' |
        grep -E '^(ad_|AD_|DUALREV_)' | grep -Ev '^(ad|AD|DUALREV)__' | sort -u)

count=$(printf '%s\n' "$names" | grep -c .)
if [ "$count" -eq 0 ]; then
    echo "api_docs: no public names found in $inc" >&2
    exit 2
fi

# The lines where entries are named: entry headings (headings with a name
# in backticks), and the first non-blank line after each.  Fenced code
# blocks hold no headings.
entry_lines=$(awk '
    /^[ \t]*```/ { fence = !fence; if (want) { print; want = 0 } ; next }
    fence { next }
    /^#/ { want = 0; if (/`/) { print; want = 1 }; next }
    want && NF { print; want = 0 }
' "$md")

missing=0
while IFS= read -r name; do
    if ! grep -qF -- "\`$name\`" <<< "$entry_lines"; then
        printf '%s\n' "\`$name\`"
        missing=$((missing + 1))
    fi
done <<< "$names"

if [ "$missing" -gt 0 ]; then
    echo "api_docs: $missing of $count names have no entry in $md" >&2
    exit 1
fi
echo "api_docs: $count names, all documented"
exit 0
