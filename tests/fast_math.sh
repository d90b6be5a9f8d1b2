#!/usr/bin/env bash
# tests/fast_math.sh CC... INCLUDE_DIR
# Including dualrev.h under -ffast-math or -ffinite-math-only must fail
# with dualrev's explanation; with AD_ALLOW_FAST_MATH it must compile.
set -uo pipefail
inc=${!#}
cc=("${@:1:$#-1}")
src=$(mktemp --suffix=.c)
trap 'rm -f "$src" "$src.o"' EXIT
printf '#include <dualrev.h>\nint main(void) { return ad_value(ad_const(1.0)) > 0.0 ? 0 : 1; }\n' > "$src"
fail=0
for flag in -ffast-math -ffinite-math-only; do
    if out=$("${cc[@]}" -std=c11 -I"$inc" "$flag" -c "$src" -o "$src.o" 2>&1); then
        echo "FAIL: $flag compiled without a diagnostic"; fail=1
    elif ! grep -q "dualrev: -ffast-math / -ffinite-math-only break dualrev's guarantees" <<<"$out"; then
        echo "FAIL: $flag failed without dualrev's diagnostic:"; echo "$out"; fail=1
    else
        echo "ok: $flag is refused with dualrev's diagnostic"
    fi
    if ! out=$("${cc[@]}" -std=c11 -I"$inc" "$flag" -DAD_ALLOW_FAST_MATH -c "$src" -o "$src.o" 2>&1); then
        echo "FAIL: $flag -DAD_ALLOW_FAST_MATH does not compile:"; echo "$out"; fail=1
    else
        echo "ok: $flag with AD_ALLOW_FAST_MATH compiles"
    fi
done
if ! out=$("${cc[@]}" -std=c11 -I"$inc" -c "$src" -o "$src.o" 2>&1); then
    echo "FAIL: the plain compile fails:"; echo "$out"; fail=1
fi
exit $fail
