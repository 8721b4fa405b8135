"""The coverage page (docs/coverage.md) and its data (benchmarks/sweep/coverage.json) from
the sweep's per-case results, and the rows that must fail the sweep.

A row fails the sweep when an aotc column is WRONG or crashes, when torch.export takes
the case and aotc fx does not, when onnx, aoti or forward+backward do not pass where fx
passes: each unless benchmarks/sweep/pinned.py names it with the words of its reason.
"""

from __future__ import annotations

import datetime
import json
from collections import Counter
from fnmatch import fnmatch
from pathlib import Path

from benchmarks.sweep.columns import ANCHORS, COLUMNS, TORCH_AOTI_FAILS, TRAINING_EXPORT_FAILS
from benchmarks.sweep.pinned import PINNED

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "coverage.md"
DATA = ROOT / "benchmarks" / "sweep" / "coverage.json"
PARTIAL = ROOT / "build" / "sweep" / "coverage-partial.md"
AOTC_COLUMNS = [c for c in COLUMNS if c not in ANCHORS]
SHOWN = {"pass": "✓", "WRONG": "**WRONG**", "refused": "refused", "fail": "✗", "crash": "**crash**", "n/a": ""}
FOLLOWS_FX = ("onnx", "aoti", "fwd+bwd")  # pass wherever fx passes, or refuse by a pinned reason


def _status(record: dict, column: str) -> str | None:
    found = record["columns"].get(column)
    return found["status"] if found else None


def pinned(name: str, column: str, detail: str) -> str | None:
    """Why this cell is expected to fail, if its detail has the pinned words."""
    for (pattern, col), (words, why) in PINNED.items():
        if col == column and fnmatch(name, pattern) and words in detail:
            return why
    return None


def problems_of(record: dict) -> list[str]:
    if record.get("eager") != "ok":
        return []
    name, out = record["name"], []
    fx = _status(record, "fx")
    for column in AOTC_COLUMNS:
        found = record["columns"].get(column)
        if not found:
            continue
        status, detail = found["status"], found["detail"]
        if status in ("WRONG", "crash"):
            if not pinned(name, column, detail):
                out.append(f"{name} {column}: {status}: {detail}")
            continue
        taken = any(_status(record, a) == "pass" for a in ("torch.export", "torch.export+caches"))
        if column == "fx" and status != "pass" and taken and not pinned(name, column, detail):
            out.append(f"{name} fx: torch.export takes it, aotc {status}: {detail}")
        torch_refuses = (column == "fwd+bwd" and TRAINING_EXPORT_FAILS in detail) or \
            (column == "aoti" and TORCH_AOTI_FAILS in detail)  # take what torch takes
        if column in FOLLOWS_FX and fx == "pass" and status not in ("pass", "n/a") and not torch_refuses \
                and not pinned(name, column, detail):
            out.append(f"{name} {column}: fx passes, {column} {status}: {detail}")
    return out


def unused_pins(records: list[dict]) -> list[str]:
    """Pins whose cases ran their column and none of which failed with the pinned words:
    a refusal that went away (fixed, or a case that no longer fails the same way). Pins
    whose cases have not run yet are not judged."""
    out = []
    for (pattern, column), (words, _why) in PINNED.items():
        cells = [r["columns"][column] for r in records
                 if fnmatch(r["name"], pattern) and column in r.get("columns", {})]
        if cells and not any(c["status"] not in ("pass", "n/a") and words in c["detail"] for c in cells):
            ran = ", ".join(sorted(Counter(c["status"] for c in cells)))
            out.append(f"`{pattern}` · {column} (ran {len(cells)}: {ran}): \"{words}\" matched nothing")
    return out


def _counts(records: list[dict]) -> dict:
    ok = [r for r in records if r.get("eager") == "ok"]
    counts = {"cases": len(records), "built": len(ok),
              "families": len({(r["library"], r["family"]) for r in ok}), "columns": {}}
    for column in COLUMNS:
        tried = [r for r in ok if _status(r, column) not in (None, "n/a")]
        statuses = Counter(_status(r, column) for r in tried)
        families = {(r["library"], r["family"]) for r in tried if _status(r, column) == "pass"}
        counts["columns"][column] = {"tried": len(tried), "families_passed": len(families), **statuses}
    return counts


def _row(record: dict) -> str:
    if record.get("eager") != "ok":
        return f"| {record['name']} | {record.get('eager', '?')[:80]} |" + " |" * (len(COLUMNS) - 1)
    cells = [SHOWN.get(_status(record, c) or "n/a", _status(record, c)) for c in COLUMNS]
    return f"| {record['name']} | " + " | ".join(cells) + " |"


def _details(records: list[dict]) -> list[str]:
    lines = []
    for r in records:
        for column, found in r.get("columns", {}).items():
            if found["status"] not in ("pass", "n/a"):
                why = pinned(r["name"], column, found["detail"])
                mark = f" (pinned: {why})" if why else ""
                lines.append(f"- `{r['name']}` · {column} · {found['status']}{mark}: {found['detail'][:240]}")
    return lines


def _commits(records: list[dict]) -> str:
    """How many cells each aotc commit ran ("+": with changes not committed; "?": before
    cells recorded it). One commit throughout is what `--resume --stale` makes."""
    ran = Counter(o.get("commit", "?") for r in records for o in r.get("columns", {}).values())
    return ", ".join(f"{c} ({n} cells)" for c, n in ran.most_common()) or "none"


def _current(records: list[dict]) -> str:
    """How many cells ran on the code the working tree has, as `--stale` judges it (per
    column: a change to the onnx format leaves the other columns' cells current)."""
    from benchmarks.sweep.run import current_commit, same_code

    now = current_commit()
    cells = [(column, o.get("commit") or "?") for r in records for column, o in r.get("columns", {}).items()]
    current = sum(same_code(ran, now, column) for column, ran in cells)
    return f"{current} of {len(cells)} cells ran on code that is {now}'s for their column"


def render(records: list[dict], problems: list[str], planned: int) -> str:
    counts = _counts(records)
    torches = sorted({r.get("torch", "?") for r in records})
    out = ["# Coverage: model architectures through every backend", "",
           f"Generated by `make sweep` on {datetime.date.today()} (torch {', '.join(torches)}; timm under torch "
           "2.14.1, which its torchvision is built for). Every model is built from a small config with random "
           "weights, called as its users call it (`model(**inputs)`), and each column's result is compared with "
           "eager: values, output structure, and what user code reads (`out.logits`, `out[0]`, each cache layer's "
           "attributes). A refusal is aotc saying no by name; WRONG would be a result that differs from eager.", "",
           f"**{counts['families']} architectures** ({counts['built']} model classes of {counts['cases']} tried; "
           "the rest did not build or run in eager from a small config, listed below).", "",
           *([f"**This run is not finished: {len(records)} of {planned} cases have a result.** "
              "`make sweep SWEEP_ARGS=--resume` goes on with the rest.", ""] if len(records) < planned else []),
           f"aotc commits the cells ran on: {_commits(records)}; {_current(records)}.", "",
           "| column | architectures passed | cases passed | WRONG | refused / failed |",
           "| --- | --- | --- | --- | --- |"]
    for column in COLUMNS:
        c = counts["columns"][column]
        failed = c.get("refused", 0) + c.get("fail", 0) + c.get("crash", 0)
        out.append(f"| {column} | {c['families_passed']} | {c.get('pass', 0)} of {c['tried']} | "
                   f"{c.get('WRONG', 0)} | {failed} |")
    out += ["", "Columns: aotc's `fx`, `onnx` and `aoti` inference bundles and `fwd+bwd` (fx forward+backward, "
            "gradients of every parameter compared); `regions` (aotc's regional export) is tried where fx is "
            "refused. The anchors: `torch.export` (strict=False, run through `.module()`), `torch.export+caches` "
            "(transformers' cache classes registered as pytrees first, as transformers' own exporter does), "
            "`torch.onnx` (dynamo, run in onnxruntime) and `torch.compile`. Each family's representative head runs "
            "every column; its other heads run fx, fwd+bwd and the torch.export anchors.", ""]
    if problems:
        out += ["## Rows that fail the sweep", "", *[f"- {p}" for p in problems], ""]
    if unused := unused_pins(records):
        out += ["## Pins that matched nothing", "", "Their cases ran and did not fail with the pinned words: remove "
                "the pin from benchmarks/sweep/pinned.py once the reason is understood.", "",
                *[f"- {u}" for u in unused], ""]
    for library in ("transformers", "diffusers", "timm"):
        mine = [r for r in records if r["library"] == library]
        if not mine:
            continue
        out += [f"## {library}", "", "| case | " + " | ".join(COLUMNS) + " |",
                "| --- |" + " --- |" * len(COLUMNS), *[_row(r) for r in mine], ""]
    out += ["## Refusals and failures, with their first lines", "", *_details(records), ""]
    return "\n".join(out)


def write_table(records: list[dict], planned: int, partial: bool, write: bool = True) -> list[str]:
    problems = [p for r in records for p in problems_of(r)]
    if write:
        page = PARTIAL if partial else PAGE
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(render(records, problems, planned))
        if not partial:
            DATA.write_text(json.dumps({"planned": planned, "counts": _counts(records), "problems": problems,
                                        "cases": records}, indent=1))
        print(f"sweep: wrote {page.relative_to(ROOT)}")
    return problems
