#!/usr/bin/env python3
"""Makes a reduced GMM reference from an ADBench "manual" reference file.

    make_gmm_subset.py FULL_MANUAL.txt OUT.txt

gmm_1k_d64_K100_manual.txt has 214500 gradient entries (5.2 MB); the tests
need only the objective and a spread of entries.  The output keeps the
header line "# d k n gamma m = ...", both objectives, and, as "index value"
lines (index into the gradient [alpha (k), mu (k d), icf (k s)]), for each
of the components 0, 1, k/2, k-2 and k-1:
  - alpha_k,
  - every entry of mu_k,
  - every log-diagonal entry q of icf_k,
  - the entries of icf_k's strict lower part l whose position within l is a
    multiple of 31, and the last one.
Values are copied as text, unchanged.  Regenerate the tests' file with

    tests/data/adbench/make_gmm_subset.py \\
        ../shared/adbench/reference/gmm_1k_d64_K100_manual.txt \\
        tests/data/adbench/gmm_1k_d64_K100_subset.txt
"""
import re
import sys


def main(src, dst):
    with open(src) as f:
        lines = f.read().splitlines()
    header = next(l for l in lines if re.match(r"#\s*d k n gamma m\s*=", l))
    d, k, n = (int(v) for v in header.split("=")[1].split()[:3])
    numbers = [l.strip() for l in lines if l.strip() and not l.lstrip().startswith("#")]
    s = d * (d + 1) // 2
    total = k * (d + 1) * (d + 2) // 2
    objectives, grad = numbers[:2], numbers[2:]
    if len(grad) != total:
        sys.exit(f"{src}: {len(grad)} gradient entries, expected {total}")

    comps = sorted({0, 1, k // 2, k - 2, k - 1} & set(range(k)))
    l_count = s - d
    picked = []
    for c in comps:
        picked.append(c)                                       # alpha
        picked += range(k + c * d, k + (c + 1) * d)            # mu
        icf = k + k * d + c * s
        picked += range(icf, icf + d)                          # q
        ls = sorted(set(range(0, l_count, 31)) | {l_count - 1}) if l_count else []
        picked += (icf + d + i for i in ls)                    # l
    picked = sorted(set(picked))

    with open(dst, "w") as out:
        out.write(header + "\n")
        out.write(f"# made by make_gmm_subset.py from {src.split('/')[-1]} (ADBench, MIT; see LICENSE)\n")
        out.write(f"# objective (gmm_objective) then objective (gmm_objective_d), then {len(picked)} of the "
                  f"{total} gradient entries [alphas(k), means(k*d), icf(k*d(d+1)/2)] as \"index value\" lines:\n")
        out.write(f"# components {' '.join(map(str, comps))}: alpha, all of mu, all log-diagonal q, "
                  "the l entries at multiples of 31 within l, and the last l\n")
        for v in objectives:
            out.write(v + "\n")
        for i in picked:
            out.write(f"{i} {grad[i]}\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
