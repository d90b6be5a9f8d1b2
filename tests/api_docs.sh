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
# not count.  Each name without an entry is printed as `name`.
#
# Every field of a public struct or union (one defined with a tag or a
# typedef name without a double underscore that starts with ad_, AD_ or
# DUALREV_) must be documented in the struct's entry: the section of API_MD
# under an entry heading that names the struct in backticks, up to the next
# heading of the same or a higher level (a struct may have several such
# sections).  A field is documented there when a fenced code block of the
# section declares the struct with that field (the block is read as the
# headers are, so a comment, a C++ constructor or a "..." declares
# nothing), or when a backtick span of its prose names it: `field`,
# `b.field`, `p->field`, `field[0]`.  The fields are those of every
# declarator of a member (size_t rows, cols; double arg[2]; the name of a
# function pointer, void (*vjp)(...)), and those of nested structs and
# unions: a named one's as member.field, an anonymous one's as the
# struct's own.  C++ member functions (a member with a parameter list, or
# a body) are not fields.  Fields with a double underscore, and fields whose
# comment in the header says "(internal)" (the comment after the member's
# ";" on the same line, or one before or inside the member), are internal
# and skipped, with what is nested in them.  Each field not documented is
# printed as `struct.field` (`struct.member.field` when nested).
#
# When something is missing the exit status is 1.  Otherwise the script
# prints "api_docs: N names, M fields, all documented" and exits 0.  Usage
# errors exit 2.
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
    # s with a mark (\034) before its last ";": that member is internal.
    function mark_before_semi(s,    i) {
        for (i = length(s); i > 0; i--)
            if (substr(s, i, 1) == ";")
                return substr(s, 1, i - 1) "\034" substr(s, i)
        return s "\034"
    }
    # At the end of a comment inside braces (a struct body) that says
    # "(internal)": marks the member it belongs to, the one whose ";" came
    # just before it on the line it opened on, else the one it is in or
    # before.  Returns out, marked.
    function internal_comment(out) {
        if (ctext !~ /\(internal\)/ || depth <= 0)
            return out
        if (!cprev)
            return out "\034"
        if (cline == FNR)
            return mark_before_semi(out)
        mark_prev = 1  # the ";" is in stmt already: code() marks it
        return out
    }
    # A comment opens after out: does a ";" end the code before it?
    function comment_opens(out,    t) {
        ctext = ""
        cline = FNR
        t = out
        sub(/[ \t]+$/, "", t)
        cprev = (t ~ /;$/)
    }
    # Removes comments from one physical line, keeping track of a comment
    # left open at the end of the line before; string and character
    # literals are copied whole.  A comment that marks a struct member
    # "(internal)" leaves a \034 in the member (internal_comment).
    function strip(line,    out, i, c, n, q) {
        out = ""
        n = length(line)
        i = 1
        while (i <= n) {
            if (in_comment) {
                if (substr(line, i, 2) == "*/") {
                    in_comment = 0
                    i += 2
                    out = internal_comment(out)
                } else {
                    ctext = ctext substr(line, i, 1)
                    i++
                }
                continue
            }
            c = substr(line, i, 1)
            if (substr(line, i, 2) == "/*") { comment_opens(out); in_comment = 1; out = out " "; i += 2; continue }
            if (substr(line, i, 2) == "//") {
                comment_opens(out)
                ctext = substr(line, i + 2)
                out = internal_comment(out)
                break
            }
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
    # The index of the "}" that closes the "{" at s[i], or 0.
    function close_brace(s, i,    d, n, c) {
        d = 0
        n = length(s)
        for (; i <= n; i++) {
            c = substr(s, i, 1)
            if (c == "{") d++
            else if (c == "}" && --d == 0) return i
        }
        return 0
    }
    # The name one declarator of a member declares, or "": the last
    # identifier, arrays, initialisers and bit-field widths dropped; a
    # function pointer or a pointer to an array, (*name)(...): name.
    function declarator_name(d,    t) {
        gsub(/\[[^]]*\]/, "", d)
        if (match(d, /\([ \t]*[*&^][*&^ \t]*([A-Za-z_][A-Za-z0-9_]*[ \t]+)*[A-Za-z_][A-Za-z0-9_]*[ \t]*\)/)) {
            t = substr(d, RSTART + 1, RLENGTH - 2)
            match(t, /[A-Za-z_][A-Za-z0-9_]*[ \t]*$/)
            t = substr(t, RSTART, RLENGTH)
            gsub(/[ \t]/, "", t)
            return t
        }
        sub(/=.*$/, "", d)
        if (match(d, /[^:][ \t]*:[^:]*$/))  # a bit-field width
            d = substr(d, 1, RSTART)
        if (!match(d, /[A-Za-z_][A-Za-z0-9_]*[ \t]*$/))
            return ""
        t = substr(d, RSTART, RLENGTH)
        gsub(/[ \t]/, "", t)
        if (t ~ /^(struct|union|enum|const|volatile|signed|unsigned|short|long|int|char|float|double|void|_Bool|bool|size_t)$/)
            return ""  # no declarator: an anonymous member
        return t
    }
    # One member declaration m ("type a, *b, c[2]"; for a nested struct,
    # union or enum, nkw is what came before its "{", nbody its body and m
    # the declarators after its "}"): prints "field NAMES PREFIXname" for
    # each of its fields.
    function member(m, nested, nkw, nbody, names, prefix,    internal, n, k, d, decl, name, c, pd, found) {
        internal = (m ~ /\034/ || (nested && nkw ~ /\034/))
        gsub(/\034/, " ", m)
        gsub(/[ \t]+/, " ", m)
        sub(/^ /, "", m)
        sub(/ $/, "", m)
        sub(/^(public|private|protected) ?: ?/, "", m)
        if (!nested) {
            if (m == "" || m ~ /^(typedef|using|friend|static|template|_Static_assert|static_assert)([ (]|$)/)
                return
            if (m ~ /\(/ && m !~ /\( ?[*&^]/)
                return  # a C++ member function
        }
        # the declarators, split at the commas outside parentheses
        n = 0
        d = ""
        pd = 0
        for (k = 1; k <= length(m); k++) {
            c = substr(m, k, 1)
            if (c == "(" || c == "[") pd++
            else if (c == ")" || c == "]") pd--
            else if (c == "," && pd == 0) { decl[++n] = d; d = ""; continue }
            d = d c
        }
        decl[++n] = d
        found = 0
        for (k = 1; k <= n; k++) {
            name = declarator_name(decl[k])
            if (name == "")
                continue
            found = 1
            if (internal || name ~ /__/)
                continue
            print "field", names, prefix name, nfile
            if (nested && nkw !~ /(^|[^A-Za-z0-9_])enum([^A-Za-z0-9_]|$)/)
                members(nbody, names, prefix name ".")
        }
        # an anonymous struct or union: its fields are the outer ones
        if (nested && !found && !internal && nkw !~ /(^|[^A-Za-z0-9_])enum([^A-Za-z0-9_]|$)/)
            members(nbody, names, prefix)
    }
    # The members of a struct or union body.  A "{" opens a nested struct,
    # union or enum, an initialiser (after "=" or a name), or the body of a
    # C++ member function (after a parameter list), which is dropped.
    function members(body, names, prefix,    n, i, j, c, m, t, nested, nkw, nbody) {
        n = length(body)
        m = ""
        nested = 0
        for (i = 1; i <= n; i++) {
            c = substr(body, i, 1)
            if (c == "{") {
                j = close_brace(body, i)
                if (!j)
                    return
                t = m
                gsub(/[ \t\034]+$/, "", t)
                if (!nested && t ~ /(^|[^A-Za-z0-9_])(struct|union|enum)([ \t\034]+[A-Za-z_][A-Za-z0-9_]*)?$/) {
                    nested = 1
                    nkw = m
                    nbody = substr(body, i + 1, j - i - 1)
                    m = ""
                } else if (t ~ /\(/ && t !~ /=/) {
                    m = ""  # a function body
                }
                i = j
                continue
            }
            if (c == ";") {
                member(m, nested, nkw, nbody, names, prefix)
                m = ""
                nested = 0
                continue
            }
            m = m c
        }
    }
    # A struct or union definition that starts the statement s: its fields.
    function fields(s,    i, j, t, tag, name, names) {
        if (!match(s, /(^|[ \t])(struct|union)([ \t]+[A-Za-z_][A-Za-z0-9_]*)?[ \t]*\{/))
            return
        i = RSTART + RLENGTH - 1
        if (index(s, "{") != i)
            return
        t = substr(s, RSTART, RLENGTH)
        tag = ""
        if (match(t, /(struct|union)[ \t]+[A-Za-z_][A-Za-z0-9_]*/)) {
            tag = substr(t, RSTART, RLENGTH)
            sub(/^[a-z]+[ \t]+/, "", tag)
        }
        j = close_brace(s, i)
        if (!j)
            return
        name = ""
        if (substr(s, 1, i) ~ /(^|[ \t])typedef[ \t]/) {
            t = substr(s, j + 1)
            gsub(/\034/, "", t)
            gsub(/[ \t]+/, " ", t)
            name = ident_before(t, ";")
        }
        # NAMES: the typedef name, then the tag, joined by "|"
        names = name
        if (tag != "" && tag != name)
            names = names == "" ? tag : names "|" tag
        if (names != "")
            members(substr(s, i + 1, j - i - 1), names, "")
    }
    function statement(s,    t, i, body, items, n, k, it) {
        fields(s)
        gsub(/\034/, "", s)
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
        if (mark_prev) {  # an "(internal)" comment after the member before
            stmt = mark_before_semi(stmt)
            mark_prev = 0
        }
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
    FNR == 1 { in_comment = 0; pending = ""; stmt = ""; depth = 0; skip = 0; mark_prev = 0; nfile++ }
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
    ' "$@"
}
raw=$(header_names "${headers[@]}") || { echo "api_docs: could not read the headers" >&2; exit 2; }

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

# The fields of the public structs: "NAMES PATH", NAMES the struct's
# typedef name and tag joined by "|", the first a public name without a
# double underscore.
fields=$(printf '%s\n' "$raw" | awk '$1 == "field" && NF == 4 { print $2, $3 }' |
         awk '{ split($1, n, "|") } n[1] ~ /^(ad_|AD_|DUALREV_)/ && n[1] !~ /__/' | sort -u)
nfields=$(printf '%s\n' "$fields" | grep -c .)

# What the structs' entries document: "STRUCT FIELD" for each field of a
# declaration of STRUCT in a fenced code block of a section whose heading
# names STRUCT in backticks (down to the next heading of the same or a
# higher level), read as the headers are; and for each field a backtick
# span of such a section's prose names (`tag`, `b.problem`, `arg[0]`).  The code blocks of the
# sections are written to files in $tmp, NNNNN.h, with lines
# "block N STRUCT" for the sections each is in.
tmp=$(mktemp -d) || { echo "api_docs: mktemp failed" >&2; exit 2; }
trap 'rm -rf "$tmp"' EXIT
structs=$(printf '%s\n' "$fields" | awk 'NF { print $1 }' | tr '|' '\n' | sort -u)
entry_words=$(printf '%s\n' "$structs" | awk -v dir="$tmp" '
    # A backtick span that names a field: `name`, `b.name`, `p->name`,
    # `name[0]`.
    function named(s,    k) {
        gsub(/^[ \t]+|[ \t]+$/, "", s)
        sub(/\[[^]]*\]$/, "", s)
        if (s !~ /^[A-Za-z_][A-Za-z0-9_]*((\.|->)[A-Za-z_][A-Za-z0-9_]*)*$/)
            return
        sub(/^.*(\.|->)/, "", s)
        for (k in open)
            print k, s
    }
    FILENAME == "-" { if (NF) want["`" $1 "`"] = $1; next }
    /^[ \t]*```/ {
        span = 0
        if (fence) {
            if (file != "") close(file)
            file = ""
        } else {
            for (k in open) {
                if (file == "") file = sprintf("%s/%05d.h", dir, ++nblock)
                print "block", nblock, k
            }
        }
        fence = !fence
        next
    }
    fence { if (file != "") print > file; next }
    /^#/ {
        span = 0
        match($0, /^#+/)
        level = RLENGTH
        for (k in open)
            if (open[k] >= level)
                delete open[k]
        for (w in want)
            if (index($0, w))
                open[want[w]] = level
    }
    !NF { span = 0; next }
    {   # backtick spans, which may run on to the next line
        n = split($0, part, "`")
        for (i = 1; i <= n; i++) {
            if (span)
                text = text " " part[i]
            if (i < n) {
                if (span)
                    named(text)
                span = !span
                text = ""
            }
        }
    }
' - "$md") || { echo "api_docs: could not read $md" >&2; exit 2; }

# The fields declared in those code blocks: "STRUCT FIELD" where the block
# is in STRUCT's entry.
doc_fields=""
blocks=("$tmp"/*.h)
if [ -f "${blocks[0]}" ]; then
    doc_fields=$(header_names "${blocks[@]}" | awk '
        $1 == "field" && NF == 4 { print "decl", $2, $3, $4 }' |
        cat <(printf '%s\n' "$entry_words" | awk '$1 == "block"') - | awk '
        $1 == "block" { inblock[$2, $3] = 1; next }
        {
            n = split($2, names, "|")
            for (i = 1; i <= n; i++)
                if (($4, names[i]) in inblock)
                    print names[i], $3
        }
    ') || { echo "api_docs: could not read the code blocks of $md" >&2; exit 2; }
fi

fmissing=0
if [ "$nfields" -gt 0 ]; then
    undocumented=$(printf '%s\n' "$entry_words" "$doc_fields" --- "$fields" | awk '
        $0 == "---" { part2 = 1; next }
        !part2 { if (NF == 2) have[$1 " " $2] = 1; next }
        NF == 2 {
            leaf = $2
            sub(/^.*\./, "", leaf)
            n = split($1, names, "|")
            for (i = 1; i <= n; i++)
                if ((names[i] " " $2) in have || (names[i] " " leaf) in have)
                    next
            print "`" names[1] "." $2 "`"
        }
    ')
    if [ -n "$undocumented" ]; then
        printf '%s\n' "$undocumented"
        fmissing=$(printf '%s\n' "$undocumented" | grep -c .)
    fi
fi

if [ "$missing" -gt 0 ]; then
    echo "api_docs: $missing of $count names have no entry in $md" >&2
fi
if [ "$fmissing" -gt 0 ]; then
    echo "api_docs: $fmissing of $nfields struct fields are not documented in their struct's entry in $md" >&2
fi
if [ "$missing" -gt 0 ] || [ "$fmissing" -gt 0 ]; then
    exit 1
fi
echo "api_docs: $count names, $nfields fields, all documented"
exit 0
