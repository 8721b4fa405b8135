"""Where the benchmark suite's figures came from: the aotc commit, torch, CPU and instruction
set each part of a run ran on, whether that is the current code (aotc/tools/code_identity.py),
and which packages hold their weights folded.

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

import torch

from aotc.tools import code_identity

CHECKOUT = Path(__file__).resolve().parents[2]
# what a part's figures depend on: a later commit that changes none of these leaves it current
# (not the tools that never run in a bench: diff, report)
CODE_PATHS = ("aotc", "exporters", "cli", "sample_models",
              *(f":(exclude,glob)aotc/tools/{f}" for f in ("diff*", "report*")))


def current_commit() -> str:
    return code_identity.current_commit(CHECKOUT, CODE_PATHS)


def isa() -> str:
    """The instruction set torch's CPU kernels and inductor's code use here (AVX2, AVX512...).
    Two hosts can share a CPU model name ("AMD EPYC") and differ in it, and with it every ratio:
    oneDNN's prepacked calls, which a folded package makes, and the GEMMs they stand against vary by it."""
    return torch.backends.cpu.get_cpu_capability()


def stamp() -> dict:
    """What a part ran on: the aotc commit ("+": with changes not committed), torch, the CPU and
    its instruction set."""
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"commit": current_commit(), "torch": importlib.metadata.version("torch"),
            "cpu": cpu, "isa": isa(), "date": datetime.date.today().isoformat()}


def parts(row: dict) -> list[str]:
    """A row's parts, each timed in one run: inference at each thread count, each training step."""
    return [f"inference {t}" for t in row.get("inference", {})] + list(row.get("train", {}))


def current(row: dict, wanted: list[str], now: str, here: str | None = None) -> bool:
    """Whether the row has each of the `wanted` parts, run on the code of commit `now` and on a
    CPU of this one's instruction set (`here`, default this machine's): a run in parts is one
    run only where every part ran on the same kind of host."""
    ran = row.get("ran", {})
    here = here or isa()
    return all(code_identity.same_code(CHECKOUT, ran.get(p, {}).get("commit", "?"), now, CODE_PATHS)
               and ran.get(p, {}).get("isa") == here for p in wanted)


def provenance(results: dict) -> str:
    """What the report's parts ran on, and how many ran on the current code."""
    now = current_commit()
    ran = [row.get("ran", {}).get(p, {}) for row in results.values() for p in parts(row)]
    commits = Counter(r.get("commit", "?") for r in ran)
    on_now = sum(code_identity.same_code(CHECKOUT, r.get("commit", "?"), now, CODE_PATHS) for r in ran)
    listed = ", ".join(f"{c} ({n})" for c, n in commits.most_common())
    others = [f"{k} {', '.join(sorted({r[k] for r in ran if k in r}))}" for k in ("torch", "cpu")
              if any(k in r for r in ran)]
    # the kind of host matters as much as the code: a run in parts is one run on one instruction set
    isas = Counter(r.get("isa", "?") for r in ran)
    if set(isas) != {"?"}:
        others.append("instruction set " + ", ".join(f"{i} ({n})" for i, n in isas.most_common()))
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
