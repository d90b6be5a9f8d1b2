#!/usr/bin/env python3
"""The library's layers, and the arrows between its files, read from a build.

    docs/architecture.py --check LIB.a   exit 1 on an arrow that must not exist
    docs/architecture.py --dot LIB.a     the picture, in DOT (docs/architecture.svg)

A file's layer is the folder of lib/ it is in (LAYERS, lowest first).  An
arrow runs from a file to each file whose functions or data it uses, as
the static library's symbol tables say (nm), plus an arrow to each
header-only module (walk.h, nary_kinds.h) that it includes.  Every arrow must run to the
same layer or a lower one, and no two files may reach each other; every
file of lib/ must be in a layer's folder, so that a new file is placed on
purpose.
"""
import collections
import os
import re
import subprocess
import sys

# Lowest first: lib/'s folders, each a layer.  A file may use its own
# layer and those below; its layer is the folder it is in.
LAYERS = [
    ("kernel", "the tape's memory, the recording cursor's slow path, per-thread state"),
    ("walk", "one walk over the records; scaled seeds and reach marks"),
    ("modes", "hooks on the slow path: second partials, checks"),
    ("rules", "operations with records of their own kind: n-ary, blocks"),
    ("sweeps", "every pass over a recording: reverse, forward, second order, edge pushing, the staged resolve, the checked sweeps"),
    ("drivers", "what the user calls: record, sweep, read out"),
]
HEADER_ONLY = ["walk.h", "nary_kinds.h"]

LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib")


def files():
    """{module: folder} for every .c of lib/ and the header-only modules;
    a file outside the layers' folders has folder None."""
    found = {}
    for folder, _, names in os.walk(LIB):
        rel = os.path.relpath(folder, LIB)
        for n in names:
            if n.endswith(".c") or n in HEADER_ONLY:
                key = n[:-2] if n.endswith(".c") else n
                found[key] = rel if rel in dict(LAYERS) else None
    return found


def layer_of():
    index = {name: i for i, (name, _) in enumerate(LAYERS)}
    return {f: index[d] for f, d in files().items() if d is not None}


def sources():
    """(module, path) of every .c of lib/."""
    for folder, _, names in os.walk(LIB):
        for n in names:
            if n.endswith(".c"):
                yield n[:-2], os.path.join(folder, n)


def arrows(archive):
    out = subprocess.run(["nm", "-A", archive], capture_output=True, text=True,
                         check=True).stdout
    defined, used = {}, collections.defaultdict(set)
    for line in out.splitlines():
        m = re.match(r"[^:]*:(?:lib_)?(?:(?:%s)_)?([^:]+)\.c\.o:\s*\S*\s+(\w)\s+(\S+)$"
                     % "|".join(name for name, _ in LAYERS), line)
        if not m:
            continue
        f, kind, sym = m.groups()
        if kind in "TDBRC":
            defined[sym] = f
        elif kind == "U":
            used[f].add(sym)
    edges = collections.defaultdict(set)
    for f, syms in used.items():
        for s in syms:
            if s in defined and defined[s] != f:
                edges[f].add(defined[s])
    for name, path in sources():
        text = open(path).read()
        for h in HEADER_ONLY:
            if '#include "%s"' % h in text:
                edges[name].add(h)
    return edges


def check(edges):
    where, bad = layer_of(), []
    for f, d in sorted(files().items()):
        if d is None:
            bad.append("%s is in no layer's folder (lib/%s)"
                       % (f, "/, lib/".join(n for n, _ in LAYERS)))
    for f, tos in sorted(edges.items()):
        for t in sorted(tos):
            for x in (f, t):
                if x not in where:  # a name read from nm that no file of lib/ has
                    bad.append("%s: in the library, not in lib/'s folders" % x)
            if f in where and t in where and where[t] > where[f]:
                bad.append("%s (%s) -> %s (%s): an arrow upwards"
                           % (f, LAYERS[where[f]][0], t, LAYERS[where[t]][0]))

    def reaches(a):
        seen, todo = set(), [a]
        while todo:
            for y in edges.get(todo.pop(), ()):
                if y not in seen:
                    seen.add(y)
                    todo.append(y)
        return seen
    for f in sorted(edges):
        for t in sorted(edges[f]):
            if f < t and f in reaches(t):
                bad.append("%s <-> %s: a loop" % (f, t))
    return bad


# Used by nearly every file: drawn without their arrows, which only clutter
# (every file may use the kernel).
UTILITIES = ["alloc", "status", "version"]
UNDRAWN_TARGETS = UTILITIES + ["tape"]


def dot(edges):
    print("digraph dualrev {")
    print('  rankdir=TB; newrank=true; ranksep=0.5; nodesep=0.25;')
    print('  node [shape=box, style=filled, fillcolor=white, fontname="Helvetica", fontsize=10];')
    print('  edge [color="#555555", arrowsize=0.6];')
    where = layer_of()
    members = [sorted(f for f in where if where[f] == i) for i in range(len(LAYERS))]
    for i, (name, what) in reversed(list(enumerate(LAYERS))):
        print('  subgraph cluster_%d { label="lib/%s: %s"; labeljust=l; fontname="Helvetica";'
              ' fontsize=11; style=filled; color="#eeeeee";' % (i, name, what))
        shown = [f for f in members[i] if f not in UTILITIES]
        for f in shown:
            label = f if f.endswith(".h") else f + ".c"
            print('    "%s" [label="%s"];' % (f, label))
        print("    { rank=same; %s }" % " ".join('"%s";' % f for f in shown))
        print("  }")
    # the layers one above the other
    tops = [[f for f in m if f not in UTILITIES][0] for m in members]
    for hi, lo in zip(reversed(tops), list(reversed(tops))[1:]):
        print('  "%s" -> "%s" [style=invis, weight=10];' % (hi, lo))
    for f, tos in sorted(edges.items()):
        for t in sorted(tos):
            if f not in UTILITIES and t not in UNDRAWN_TARGETS:
                print('  "%s" -> "%s";' % (f, t))
    print("}")


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("--check", "--dot"):
        print(__doc__, file=sys.stderr)
        return 2
    edges = arrows(sys.argv[2])
    if sys.argv[1] == "--dot":
        dot(edges)
        return 0
    bad = check(edges)
    for b in bad:
        print(b)
    print("architecture: %d files, %d arrows, %s"
          % (len(layer_of()), sum(len(v) for v in edges.values()),
             "%d problems" % len(bad) if bad else "every arrow downwards"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
