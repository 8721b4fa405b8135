"""Where and why a model cannot be captured whole: the graph-break report.

torch.export stops at the first thing it cannot trace, with an error about symbols
and guards. Dynamo, which torch.compile uses, instead breaks the graph there, records
a reason with the user's stack, and goes on; `torch._dynamo.explain` runs the model
that way once and returns every break. aotc uses it for the report (and not
torch.export's error or draft export's report, which name one failure, or only the
data-dependent ones): every place, in the user's own file and line, in plain words,
with what to do about it.
"""

from __future__ import annotations

import logging
import os

import torch

from aotc import _torch_compat as tc
from aotc.bundle.regions_schema import BreakEntry as GraphBreak  # one place a model cannot be captured

_TORCH_DIR = os.path.dirname(torch.__file__)
_AOTC_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # aotc/

# (words in dynamo's reason, kind, plain words, what to do)
_KINDS = [
    (("generic_jump", "data-dependent", "Data-dependent", "jump"), "data-dependent branch",
     "Python branches on a tensor's value (an `if` or `while` on a tensor)",
     "use torch.cond for both branches, torch._check() if the condition always holds, or move the branch "
     "out of forward; or export the submodules around it with --regions"),
    (("item()", "tolist", "capture_scalar_outputs", "__bool__", "__float__", "__int__"), "tensor value in Python",
     "a tensor's value is read into a Python number (`.item()`, `float(t)`, `bool(t)`)",
     "keep the value a tensor, or move the code that reads it (logging, metrics) out of forward; or --regions"),
    (("print", "logging", "logger"), "printing or logging", "forward prints or logs",
     "move the print or log call out of forward (or behind `if not torch.compiler.is_compiling()`); or --regions"),
    (("call_function", "Unsupported function", "skip", "builtin", "not supported", "Unsupported method"),
     "untraceable call", "forward calls a function torch cannot trace (a library outside torch, or C code)",
     "move the call out of forward, register it as a custom op (torch.library.custom_op), or --regions"),
]


def where(b: GraphBreak) -> str:
    return f"{b.file}:{b.line} in {b.function}"


def _classify(reason: str) -> tuple[str, str, str]:
    for words, kind, plain, fix in _KINDS:
        if any(w in reason for w in words):
            return kind, plain, fix
    first = reason.strip().splitlines()[0] if reason.strip() else "unknown"
    return "unsupported Python", f"torch cannot trace this code ({first})", "move it out of forward, or --regions"


def _user_frames(stack) -> list:
    return [f for f in stack if not f.filename.startswith((_TORCH_DIR, _AOTC_DIR)) and "<" not in f.filename]


def report(model: torch.nn.Module, args: tuple, kwargs: dict) -> list[GraphBreak]:
    """Every graph break of one run of `model(*args, **kwargs)`, in the order met; each
    place once. Runs the model once under Dynamo (on copies of nothing: the model must
    tolerate one more call, as it did for capture)."""
    quiet = [logging.getLogger(name) for name in ("torch._dynamo", "torch._inductor", "torch.fx")]
    levels = [lg.level for lg in quiet]
    for lg in quiet:
        lg.setLevel(logging.ERROR)
    try:
        explained = tc.dynamo_explain(model, args, kwargs)
    finally:
        for lg, level in zip(quiet, levels):
            lg.setLevel(level)
    breaks, seen = [], set()
    for reason in explained.break_reasons:
        frames = _user_frames(reason.user_stack)
        if not frames:
            continue
        inner = frames[-1]
        key = (inner.filename, inner.lineno)
        if key in seen:
            continue
        seen.add(key)
        kind, plain, fix = _classify(reason.reason)
        breaks.append(GraphBreak(
            file=inner.filename, line=inner.lineno, function=inner.name, code=(inner.line or "").strip(),
            kind=kind, reason=plain, fix=fix, torch_reason=reason.reason.strip().splitlines()[0],
            stack=[f"{f.filename}:{f.lineno} in {f.name}" for f in frames],
        ))
    return breaks


def describe(breaks: list[GraphBreak]) -> str:
    """The report as text, a paragraph per break."""
    lines = []
    for i, b in enumerate(breaks, 1):
        lines.append(f"  {i}. {where(b)}: {b.code}")
        if len(b.stack) > 1:
            lines.append(f"     called from {' -> '.join(b.stack[:-1])}")
        lines.append(f"     {b.kind}: {b.reason}.")
        lines.append(f"     What to do: {b.fix}.")
    return "\n".join(lines)
