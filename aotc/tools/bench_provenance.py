"""Where the benchmark suite's figures came from: the aotc commit, torch and CPU each part of
a run ran on, whether that is the current code (aotc/tools/code_identity.py), and which
packages hold their weights folded.

A part is a model's inference at one thread count, or one of its training steps: what one
`aotc bench --suite` run of the model times together. The suite takes hours, so it runs in
parts; the report says how many ran on the code it is published with.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import platform
from collections import Counter
from pathlib import Path

from aotc.tools import code_identity

CHECKOUT = Path(__file__).resolve().parents[2]
# what a part's figures depend on: a later commit that changes none of these leaves it current
# (not the tools that never run in a bench: diff, report)
CODE_PATHS = ("aotc", "exporters", "cli", "sample_models",
              *(f":(exclude,glob)aotc/tools/{f}" for f in ("diff*", "report*")))


def current_commit() -> str:
    return code_identity.current_commit(CHECKOUT, CODE_PATHS)


def stamp() -> dict:
    """What a part ran on: the aotc commit ("+": with changes not committed), torch, the CPU."""
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"commit": current_commit(), "torch": importlib.metadata.version("torch"),
            "cpu": cpu, "date": datetime.date.today().isoformat()}


def parts(row: dict) -> list[str]:
    """A row's parts, each timed in one run: inference at each thread count, each training step."""
    return [f"inference {t}" for t in row.get("inference", {})] + list(row.get("train", {}))


def current(row: dict, wanted: list[str], now: str) -> bool:
    """Whether the row has each of the `wanted` parts, run on the code of commit `now`."""
    ran = row.get("ran", {})
    return all(code_identity.same_code(CHECKOUT, ran.get(p, {}).get("commit", "?"), now, CODE_PATHS) for p in wanted)


def provenance(results: dict) -> str:
    """What the report's parts ran on, and how many ran on the current code."""
    now = current_commit()
    ran = [row.get("ran", {}).get(p, {}) for row in results.values() for p in parts(row)]
    commits = Counter(r.get("commit", "?") for r in ran)
    on_now = sum(code_identity.same_code(CHECKOUT, r.get("commit", "?"), now, CODE_PATHS) for r in ran)
    listed = ", ".join(f"{c} ({n})" for c, n in commits.most_common())
    others = [f"{k} {', '.join(sorted({r[k] for r in ran if k in r}))}" for k in ("torch", "cpu")
              if any(k in r for r in ran)]
    return (f"Parts (a model's inference at one thread count, or one training step) per aotc commit they ran on: "
            f"{listed} (\"?\": before parts recorded it); {on_now} of {len(ran)} ran on the code of {now} "
            f"(aotc/, exporters/, cli/, sample_models/)" + (f"; {'; '.join(others)}" if others else "") + ".")


def folding(results: dict) -> str:
    """Which inference packages hold their weights folded, and why the others do not."""
    builds = {n: e for n, r in results.items() for e in ((r.get("compile") or {}).get("build") or {}).values()}
    unfolded = [f"{n} ({e.get('not_folded') or 'no reason recorded'})" for n, e in builds.items()
                if e.get("weights") != "folded"]
    return (f"Weights: folded into the inference package (constants inductor prepacks) in {len(builds) - len(unfolded)} "
            f"of {len(builds)} models" + (f"; passed as inputs in {'; '.join(unfolded)}." if unfolded else "."))
