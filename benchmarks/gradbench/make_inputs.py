"""Writes the JSON inputs of GradBench's ht, kmeans, saddle and particle
evals, as the evals send them to a tool (without the min_runs/min_seconds
fields).  Our own script (see README.md).

ht: GradBench's own reader (python/gradbench/gradbench/evals/ht/io.py,
imported from --gradbench) on its data files, the eval's default model
("big") and variant ("complicated"), as evals/ht run.py calls it.

kmeans: evals/kmeans run.py draws its inputs inline, so the same steps are
repeated here: np.random.seed(31337), then, for the default sizes sorted
by k n d (a stable sort), points = np.random.rand(n, d) and centroids =
the last k points.  Each input depends on the draws before it, so every
earlier size is drawn too.  Needs numpy and dataclasses_json (Debian:
python3-numpy, python3-dataclasses-json).

saddle, particle: each eval's run.py sends one input, a dict literal that
its main() assigns to `input` ({"start": [1.0, 1.0]}, {"w": 0.0}); it is
read from the source (ast), as importing run.py needs GradBench's protocol
dependencies.

Usage: make_inputs.py --gradbench DIR --out DIR [--ht hand1_t26_c100 ...]
                      [--kmeans 10,1000,8 ...] [--saddle] [--particle]
"""

import argparse
import ast
import json
import sys
from pathlib import Path

# evals/kmeans run.py's defaults.
KMEANS_K = [10, 100, 1000]
KMEANS_N = [1000, 10000]
KMEANS_D = [8, 16]


def write_json(path: Path, value) -> None:
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        json.dump(value, f)
    tmp.replace(path)


def make_ht(gradbench: Path, out: Path, stems: list[str]) -> None:
    sys.path.insert(0, str(gradbench / "python" / "gradbench"))
    from gradbench.evals.ht import io  # GradBench's reader

    data_dir = gradbench / "evals" / "ht" / "data" / "complicated_big"
    for stem in stems:
        path = out / f"ht_{stem}.json"
        if path.exists():
            continue
        fn = data_dir / f"{stem}.txt"
        if not fn.exists():
            sys.exit(f"make_inputs.py: no {fn}")
        value = io.read_hand_instance(data_dir / "model", fn, True).to_dict()
        write_json(path, value)
        print(f"wrote {path}")


def make_kmeans(out: Path, sizes: list[tuple[int, int, int]]) -> None:
    import numpy as np

    wanted = {s for s in sizes if not (out / kmeans_name(*s)).exists()}
    if not wanted:
        return
    combinations = sorted(
        [(k, n, d) for k in KMEANS_K for n in KMEANS_N for d in KMEANS_D],
        key=lambda v: v[0] * v[1] * v[2],
    )
    unknown = wanted - set(combinations)
    if unknown:
        sys.exit(f"make_inputs.py: {sorted(unknown)} not among GradBench's kmeans sizes")
    np.random.seed(31337)
    for k, n, d in combinations:
        points = np.random.rand(n, d).tolist()
        if (k, n, d) in wanted:
            centroids = points[-k:]
            path = out / kmeans_name(k, n, d)
            write_json(path, {"points": points, "centroids": centroids})
            print(f"wrote {path}")
            wanted.discard((k, n, d))
            if not wanted:
                return


def literal_input(gradbench: Path, module: str):
    """The dict literal assigned to `input` in evals/<module>/run.py."""
    path = gradbench / "python" / "gradbench" / "gradbench" / "evals" / module / "run.py"
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Assign)
            and [getattr(t, "id", None) for t in node.targets] == ["input"]
            and isinstance(node.value, ast.Dict)
        ):
            return ast.literal_eval(node.value)
    sys.exit(f"make_inputs.py: no `input = {{...}}` in {path}")


def make_literal(gradbench: Path, out: Path, module: str) -> None:
    path = out / f"{module}.json"
    value = literal_input(gradbench, module)
    if path.exists() and json.loads(path.read_text()) == value:
        return
    write_json(path, value)
    print(f"wrote {path}")


def kmeans_name(k: int, n: int, d: int) -> str:
    return f"kmeans_k{k}_n{n}_d{d}.json"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gradbench", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ht", nargs="*", default=[])
    parser.add_argument("--kmeans", nargs="*", default=[])
    parser.add_argument("--saddle", action="store_true")
    parser.add_argument("--particle", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    make_ht(args.gradbench, args.out, args.ht)
    sizes = [tuple(int(v) for v in s.split(",")) for s in args.kmeans]
    make_kmeans(args.out, sizes)
    for module in ("saddle", "particle"):
        if getattr(args, module):
            make_literal(args.gradbench, args.out, module)


if __name__ == "__main__":
    main()
