"""The coverage sweep: every case of every zoo through every column, a child process each.

    .venv/bin/python -m benchmarks.sweep.run [-j 2] [--slice K] [--only SUBSTR] [--resume]
                                             [--libraries transformers,diffusers,timm]

Each family's representative case (its causal LM head, else its base model, else the first
head) runs every column; its other heads run fx, fx forward+backward and the torch.export
anchors: the other backends compile the same layers again for a head that adds one linear
layer, which is most of the sweep's time. timm runs in build/venv-torch-2.14.1 (torchvision
is built for that torch).

Results: build/sweep/results/<case>.json per case (kept for --resume), then the table
(docs/coverage.md) and its data (benchmarks/sweep/coverage.json) from every result there.
build/ does not outlive a checkout, and the whole sweep takes longer than one session: with
--resume, a case with no result there starts from its record in the committed coverage.json,
so each session's part, committed with its table, is where the next one goes on.
Exit status 1 if any row is WRONG, crashes aotc, or is taken by torch.export and not by aotc fx
without a pinned reason (benchmarks/sweep/pinned.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from aotc.tools import code_identity
from benchmarks.sweep.columns import COLUMNS

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "build" / "sweep" / "results"
VENVS = {"main": ROOT / ".venv" / "bin" / "python", "torch-2.14.1": ROOT / "build" / "venv-torch-2.14.1" / "bin" / "python"}
LIBRARY_VENV = {"transformers": "main", "diffusers": "main", "timm": "torch-2.14.1"}
HEAD_PREFERENCE = ("causal-lm", "base", "image-cls", "seq-cls", "masked-lm", "speech")
OTHER_HEAD_COLUMNS = ("fx", "fwd+bwd", "torch.export", "torch.export+caches")
TRANSFORMERS_ONLY = ("torch.export+caches",)  # n/a elsewhere: not planned, so no child builds the model for it
# what a cell's result depends on: a later commit that changes none of these leaves the cell
# current. Not the harness's driver and page (run.py, table.py), its pins, or the parts of aotc
# no column calls (bench, report, diff, the benchmark suite's models). The libraries are whatever the
# venvs hold: each record names its torch.
CODE_PATHS = ("aotc", "exporters", "benchmarks/sweep",
              *(f":(exclude)benchmarks/sweep/{f}" for f in ("run.py", "table.py", "pinned.py", "coverage.json")),
              *(f":(exclude,glob)aotc/tools/{f}" for f in ("bench*", "report*", "diff*", "suite_models/**",
                                                            "code_identity.py")))
# the onnx format's own modules, which only the onnx column imports (formats.get("onnx")): a change
# there leaves every other column's cells current
ONNX_ONLY = ("exporters/onnx.py", "exporters/onnx_translations.py")
CASE_TIMEOUT_S = 900
CHUNK = 6  # cases per child process: each start imports torch and the library (seconds)


@dataclass(frozen=True)
class Planned:
    name: str
    library: str
    family: str
    head: str
    venv: str
    columns: tuple[str, ...]
    representative: bool  # its family's head that runs every column


def listed(libraries: list[str]) -> list[dict]:
    """The cases of each library, listed by the python of the venv that builds them."""
    found = []
    for venv in sorted({LIBRARY_VENV[lib] for lib in libraries}):
        mine = [lib for lib in libraries if LIBRARY_VENV[lib] == venv]
        if not VENVS[venv].exists():
            print(f"sweep: {VENVS[venv]} is missing, so {', '.join(mine)} is not swept "
                  f"(make sweep-venv builds it)", file=sys.stderr)
            continue
        out = subprocess.run([str(VENVS[venv]), "-m", "benchmarks.sweep.zoos", *mine], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout
        found.extend(json.loads(out.strip().splitlines()[-1]))
    return sorted(found, key=lambda c: c["name"])


def plan(cases: list[dict]) -> list[Planned]:
    by_family: dict[tuple[str, str], list[dict]] = {}
    for c in cases:
        by_family.setdefault((c["library"], c["family"]), []).append(c)
    planned = []
    for members in by_family.values():
        heads = {c["head"]: c for c in members}
        main = next((heads[h] for h in HEAD_PREFERENCE if h in heads), members[0])
        for c in members:
            columns = tuple(COLUMNS) if c is main else OTHER_HEAD_COLUMNS
            if c["library"] != "transformers":
                columns = tuple(col for col in columns if col not in TRANSFORMERS_ONLY)
            planned.append(Planned(c["name"], c["library"], c["family"], c["head"], c["venv"], columns, c is main))
    return sorted(planned, key=lambda p: p.name)


def sliced(planned: list[Planned], k: int) -> list[Planned]:
    """Every k-th architecture (in name order), by its representative case."""
    return [p for p in planned if p.representative][::k]


def chunks(todo: list[Planned], size: int = CHUNK) -> list[list[Planned]]:
    """Consecutive cases of one venv, a few per child process; a family is never split."""
    out: list[list[Planned]] = []
    for p in todo:
        last = out[-1] if out else None
        same_family = last and (last[-1].library, last[-1].family) == (p.library, p.family)
        if last and last[-1].venv == p.venv and (same_family or len(last) < size):
            last.append(p)
        else:
            out.append([p])
    return out


def result_path(results: Path, name: str) -> Path:
    return results / (name.replace("/", "__") + ".json")


def missing(p: Planned, results: Path, commit: str | None = None) -> Planned | None:
    """`p` with only the columns its result lacks (None: nothing left), for --resume; with
    `commit`, columns a commit with other code ran count as missing too."""
    record = _read(p, results)
    if record is None:
        return p
    if record.get("eager") != "ok":
        return None
    left = tuple(c for c in p.columns if c not in record["columns"] or c == record.get("running")
                 or (commit and not same_code(record["columns"][c].get("commit") or "?", commit, c)))
    return dataclasses.replace(p, columns=left) if left else None


def current_commit() -> str:
    """HEAD's short hash, with "+" where the working tree's code (CODE_PATHS) differs from it:
    not the page and data a run writes, which would make every run after the first "+"."""
    return code_identity.current_commit(ROOT, CODE_PATHS)


def code_paths(column: str | None = None) -> tuple[str, ...]:
    """What a column's cells depend on: CODE_PATHS, less the onnx format's modules for every
    column but onnx (None: every column's)."""
    if column in (None, "onnx"):
        return CODE_PATHS
    return (*CODE_PATHS, *(f":(exclude){f}" for f in ONNX_ONLY))


def same_code(ran: str, now: str, column: str | None = None) -> bool:
    """Whether commit `ran` has the code of `now` that `column`'s cells depend on ("+":
    changes not committed, so never the same; "?": unknown)."""
    return code_identity.same_code(ROOT, ran, now, code_paths(column))


def seed(planned: list[Planned], results: Path, data: Path) -> int:
    """Write the records `data` (a committed coverage.json) holds for planned cases that have
    no result in `results`, once per case and results folder (a result deleted after that runs
    again); how many. The folder's .seeded lists the cases already offered, so a run of one
    library does not keep another's records out of a later run. Each column keeps the commit
    it ran under, so --stale still runs again what other code ran."""
    stamp = results / ".seeded"
    if not data.exists():
        return 0
    offered = set(stamp.read_text().split()) if stamp.exists() else set()
    names = {p.name for p in planned} - offered
    seeded = 0
    for record in json.loads(data.read_text())["cases"]:
        path = result_path(results, record["name"])
        if record["name"] in names and not path.exists():
            path.write_text(json.dumps(record, indent=1))
            seeded += 1
    stamp.write_text("".join(f"{n}\n" for n in sorted(offered | names)))
    return seeded


def planned_only(record: dict, columns: tuple[str, ...]) -> dict:
    """The record with only the columns the plan gives its case: cells an older plan ran
    (torch.export+caches on timm and diffusers) are left off the page and its counts."""
    return {**record, "columns": {c: o for c, o in record.get("columns", {}).items() if c in columns}}


def _read(p: Planned, results: Path) -> dict | None:
    path = result_path(results, p.name)
    return json.loads(path.read_text()) if path.exists() else None


def run_group(group: list[Planned], timeout: float, results: Path, resume: bool) -> list[dict]:
    """A chunk of cases in one child process; a child that dies or runs out of time has the
    case it was in marked, and a new child goes on with the rest. With `resume`, each case's
    columns are added to its earlier result."""
    for p in group:
        if not resume:
            result_path(results, p.name).unlink(missing_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", AOTC_SWEEP_COMMIT=current_commit())
    records, left = [], list(group)
    while left:
        venv = left[0].venv
        cmd = [str(VENVS[venv]), "-m", "benchmarks.sweep.child", str(results),
               *[f"{p.name}={','.join(p.columns)}" for p in left]]
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                                  timeout=timeout * len(left))
            failed = proc.returncode != 0 and f"the child exited {proc.returncode}: {_last_line(proc.stderr)}"
        except subprocess.TimeoutExpired:
            failed = f"timeout after {time.perf_counter() - start:.0f} s"
        while left:
            p, record = left[0], _read(left[0], results)
            if record is None or record.get("running"):
                if not failed:
                    failed = "the child left no result"
                record = record or {"name": p.name, "library": p.library, "family": p.family, "head": p.head,
                                    "columns": {}, "eager": f"build failed: {failed}"}
                if record.get("running"):  # the column it was in when it died
                    record["columns"][record["running"]] = {"status": "crash", "detail": failed, "seconds": 0}
                record["running"] = None
                result_path(results, p.name).write_text(json.dumps(record, indent=1))
                records.append(record)
                left.pop(0)
                break  # a new child for the rest
            records.append(record)
            left.pop(0)
    return records


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _summary(record: dict) -> str:
    if record.get("eager") != "ok":
        return record.get("eager", "?")
    return ", ".join(f"{c} {o['status']}" for c, o in record["columns"].items())


def main(argv: list[str] | None = None) -> int:
    from benchmarks.sweep.table import write_table

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--slice", type=int, default=1,
                    help="every K-th architecture only, its representative case")
    ap.add_argument("--only", default="", help="cases whose name holds this")
    ap.add_argument("--resume", action="store_true",
                    help="keep finished results: run only the columns each case lacks")
    ap.add_argument("--libraries", default="transformers,diffusers,timm")
    ap.add_argument("--stale", action="store_true",
                    help="with --resume, also run again the columns a commit with other code ran")
    ap.add_argument("--timeout", type=float, default=CASE_TIMEOUT_S, help="seconds per case")
    ap.add_argument("--minutes", type=float, default=0,
                    help="start no chunk of cases after this many minutes (0: no limit); --resume goes on later")
    ap.add_argument("--columns", default="", help="these columns only (comma-separated), on every case")
    ap.add_argument("--skip", default="", help="leave these columns out (comma-separated), e.g. aoti,torch.compile")
    ap.add_argument("--results", default=str(RESULTS), help="where per-case results go")
    ap.add_argument("--no-table", action="store_true", help="write results only, not the coverage page")
    ap.add_argument("--table-only", action="store_true", help="run nothing: the page from the results there are")
    args = ap.parse_args(argv)

    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    libraries = args.libraries.split(",")
    planned = [p for p in plan(listed(libraries)) if args.only in p.name]
    if args.slice > 1:
        planned = sliced(planned, args.slice)
    plan_columns = {p.name: p.columns for p in planned}  # before --columns and --skip narrow this run
    if args.columns:
        planned = [dataclasses.replace(p, columns=tuple(args.columns.split(","))) for p in planned]
    if args.skip:
        skip = set(args.skip.split(","))
        planned = [dataclasses.replace(p, columns=tuple(c for c in p.columns if c not in skip)) for p in planned]
    if args.resume:
        from benchmarks.sweep.table import DATA

        print(f"sweep: {seed(planned, results, DATA)} results taken from {DATA.relative_to(ROOT)}", flush=True)
    commit = current_commit() if args.stale else None
    todo = [] if args.table_only else [p for p in (missing(p, results, commit) if args.resume else p for p in planned) if p]
    # every family's representative first: a run stopped early has covered the most architectures
    todo.sort(key=lambda p: (not p.representative, p.name))
    groups = chunks(todo)
    print(f"sweep: {len(planned)} cases, {len(todo)} to run, {args.jobs} at a time", flush=True)
    start, done = time.perf_counter(), 0
    deadline = start + args.minutes * 60 if args.minutes else float("inf")

    def run_in_time(group: list[Planned]) -> list[dict]:
        return run_group(group, args.timeout, results, args.resume) if time.perf_counter() < deadline else []

    with ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_in_time, group) for group in groups]
        for future in as_completed(futures):
            for record in future.result():
                done += 1
                print(f"[{done}/{len(todo)} {(time.perf_counter() - start) / 60:.0f} min] {record['name']}: "
                      f"{_summary(record)}", flush=True)
    if done < len(todo):
        print(f"sweep: stopped after {args.minutes:g} minutes, {len(todo) - done} cases left (--resume runs them)",
              flush=True)
    records = [planned_only(r, plan_columns[p.name]) for p in planned if (r := _read(p, results)) is not None]
    whole = args.slice == 1 and not args.only and not args.columns
    planned_count = len(planned)
    if whole and set(libraries) != set(LIBRARY_VENV):
        # a run of some libraries (timm needs its venv, which a checkout may lack): the page keeps
        # the committed records of the others, each column naming the commit it ran on
        from benchmarks.sweep.table import DATA

        others = [r for r in json.loads(DATA.read_text())["cases"] if r["library"] not in libraries] \
            if DATA.exists() else []
        # by library, as a whole run plans them (a stable sort keeps each library's own order)
        records = sorted(records + others, key=lambda r: r["library"])
        planned_count += len(others)
        print(f"sweep: the page keeps {len(others)} committed results of other libraries", flush=True)
    problems = write_table(records, planned_count, partial=not whole, write=not args.no_table)
    for line in problems:
        print(f"sweep: {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
