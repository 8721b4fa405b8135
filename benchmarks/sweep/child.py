"""Sweep cases in a process of their own, one after another: build each, run eager, run
each of its columns.

    python -m benchmarks.sweep.child RESULTS_DIR NAME=COLUMN,COLUMN... [NAME=...]

A case's result file is rewritten after every column (and a second pass adds its
columns to the ones the first wrote), so a case the parent kills for time
keeps what it finished (the parent marks the column that was running). One process takes
several cases because importing torch and the model library costs seconds each time.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import warnings
from dataclasses import asdict
from pathlib import Path

import torch

from aotc import _torch_compat as tc
from benchmarks.sweep.columns import COLUMNS, Context, first_line, run_column
from benchmarks.sweep.compare import differs
from benchmarks.sweep.zoos import find


def result_path(results: Path, name: str) -> Path:
    return results / (name.replace("/", "__") + ".json")


def _write(path: Path, record: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, path)


COMMIT = os.environ.get("AOTC_SWEEP_COMMIT", "?")  # the aotc commit each column ran (set by run.py)
# torch.distributions' argument checks as a fresh process has them: Dynamo's first use (a
# torch.compile column) turns them off for the rest of the process, and GroupViT's training-mode
# export then passed where a fresh process fails. Each case and column starts with them as here.
CHECKS = tc.distributions_check_arguments()


def fresh_process_state() -> None:
    torch.distributions.Distribution.set_default_validate_args(CHECKS)


def run_case(name: str, out: Path, columns: list[str]) -> None:
    case = find(name)
    record = {"name": name, "library": case.library, "family": case.family, "head": case.head,
              "torch": torch.__version__, "columns": {}, "running": None}
    earlier = json.loads(out.read_text()) if out.exists() else None
    if earlier and earlier.get("eager") == "ok" and earlier.get("torch") == record["torch"]:
        record["columns"] = earlier["columns"]  # a second pass adds columns to the first's
    start = time.perf_counter()
    fresh_process_state()
    try:
        model, inputs = case.build()
        torch.manual_seed(0)
        with torch.no_grad():
            eager = model(**inputs)
            torch.manual_seed(0)
            again = model(**inputs)
        why = differs(again, eager, dict(rtol=0, atol=0))
        record["params"] = sum(p.numel() for p in model.parameters())
        record["build_seconds"] = round(time.perf_counter() - start, 1)
        if why:
            record["eager"] = f"not deterministic: {why}"
            _write(out, record)
            return
        record["eager"] = "ok"
    except Exception as e:
        record["eager"] = f"build failed: {first_line(e)}"
        _write(out, record)
        return
    with tempfile.TemporaryDirectory(prefix="sweep-") as root:
        statuses = {c: o["status"] for c, o in record["columns"].items()}
        ctx = Context(name, case.library, model, inputs, eager, Path(root), earlier=statuses)
        for column in columns:
            record["running"] = column
            _write(out, record)
            fresh_process_state()
            record["columns"][column] = {**asdict(run_column(column, ctx)), "commit": COMMIT}
            ctx.earlier[column] = record["columns"][column]["status"]  # regions reads fx's, run just now
        record["running"] = None
        _write(out, record)


def main(argv: list[str]) -> int:
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)  # the parent runs cases side by side on a 2-core machine
    results = Path(argv[0])
    for spec in argv[1:]:
        name, _, cols = spec.partition("=")
        columns = cols.split(",") if cols else list(COLUMNS)
        unknown = [c for c in columns if c not in COLUMNS]
        if unknown:
            sys.exit(f"unknown columns {unknown}; known: {list(COLUMNS)}")
        run_case(name, result_path(results, name), columns)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
