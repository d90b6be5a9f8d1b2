"""Validates the outputs that bench_saddle and bench_particle print (lines
"OUTPUT<TAB>eval<TAB>label<TAB>who<TAB>json") the way GradBench's evals do:
each eval's own expect() (python/gradbench/gradbench/evals/<eval>/run.py)
and GradBench's comparison (gradbench/comparison.py, what eval.py's
mismatch() calls), both imported from --gradbench.  Our own script.

run.py imports gradbench.eval, which needs pydantic for the protocol's
messages; where pydantic is missing, a stand-in module with the three names
run.py imports is put in its place (expect() uses none of them).  Needs
numpy (comparison.py).

Prints one line per output ("# GradBench validator: saddle default dualrev:
ok") and exits 1 if one fails ("VALIDATION FAIL").

Usage: validate.py --gradbench DIR LOG
"""

import argparse
import importlib
import json
import sys
import types
from pathlib import Path


def import_gradbench(gradbench: Path) -> None:
    sys.path.insert(0, str(gradbench / "python" / "gradbench"))
    try:
        importlib.import_module("gradbench.eval")
    except ModuleNotFoundError as e:
        if e.name != "pydantic":
            raise
        stand_in = types.ModuleType("gradbench.eval")
        stand_in.EvaluateResponse = dict
        stand_in.SingleModuleValidatedEval = None
        stand_in.mismatch = None
        sys.modules["gradbench.eval"] = stand_in


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gradbench", type=Path, required=True)
    parser.add_argument("log", type=Path)
    args = parser.parse_args()
    import_gradbench(args.gradbench)
    from gradbench.comparison import compare_json_objects

    failed = False
    for line in args.log.read_text().splitlines():
        fields = line.split("\t")
        if fields[0] != "OUTPUT":
            continue
        _, module, label, who, output = fields
        run = importlib.import_module(f"gradbench.evals.{module}.run")
        expected = run.expect("rr", None)  # every function expects the same
        mismatches = compare_json_objects(expected["output"], json.loads(output))
        verdict = "ok" if not mismatches else "VALIDATION FAIL: " + "; ".join(mismatches)
        failed = failed or bool(mismatches)
        print(f"# GradBench validator: {module} {label} {who}: {verdict}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
