"""Sizes 0 and 1 of dynamic dims: run, not trusted.

torch traces a dynamic dim assuming it is at least 2 (a size of 1 broadcasts, and the
trace would otherwise branch on it), while torch.export reports the range the user
declared, often from 1 or 0. Whether the graph is right for the sizes in between is
checked here, at export, by running the freshly written bundle against eager on the
example inputs cut down to each such size. The bundle's range starts at the smallest
size from which every checked size replayed as eager did; where that is above the
declared minimum, metadata.json keeps both (`min` and `declared_min`), and the exporter
says so.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import torch

from aotc._torch_compat import pytree
from aotc.bundle.files import Bundle
from aotc.bundle.schema import Metadata, TensorMeta
from aotc.capture.module_copy import copy_module
from aotc.tools.reference import run_eager
from aotc.tools.verify import compare, run_artifact


def _cut(flat: list, metas: list[TensorMeta], symbol: str, size: int) -> list | None:
    """The example inputs with every dim of `symbol` cut to `size`; None when the symbol
    also appears inside a size expression (s0 + 1, 2*s0), which a cut cannot follow."""
    out = []
    for t, meta in zip(flat, metas):
        for dim, d in meta.dynamic_dims.items():
            if d.symbol == symbol:
                t = t.narrow(int(dim), 0, size)
            elif re.search(rf"\b{re.escape(symbol)}\b", d.symbol):
                return None
        out.append(t.clone() if isinstance(t, torch.Tensor) else t)
    return out


def _replays(root: Path, module, inputs, names, mode: str, loss, training: bool) -> bool:

    try:
        expected = run_eager(copy_module(module).train(training), *inputs, names, mode, loss)
    except Exception:  # eager itself does not take this size: neither will the bundle
        return False
    try:
        actual = run_artifact(Bundle.open(root), "fx", "cpu", inputs, expected, public_keys=())  # export's own
    except Exception:
        return False
    return all(c.passed for c in compare("fx", expected, actual, {}, None))


def check_small_sizes(root: Path, metadata: Metadata, small_sizes: dict[str, int], module, flat: list, in_spec,
                      names: list[str], mode: str, loss, training: bool) -> Metadata:
    """`metadata` with each dynamic dim's min raised past the sizes that did not replay."""
    declared = {d.symbol: d.min for m in metadata.user_inputs for d in m.dynamic_dims.values()}
    accepted: dict[str, int] = {}
    for symbol, traced in small_sizes.items():
        lowest = traced
        for size in range(traced - 1, declared.get(symbol, traced) - 1, -1):
            cut = _cut(flat, metadata.user_inputs, symbol, size)
            if cut is None or not _replays(root, module, pytree.tree_unflatten(cut, in_spec), names, mode, loss, training):
                break
            lowest = size
        accepted[symbol] = lowest
    user_inputs = []
    for meta in metadata.user_inputs:
        dims = {
            k: dataclasses.replace(d, min=accepted[d.symbol], declared_min=d.min if d.declared_min is None else d.declared_min)
            if accepted.get(d.symbol, d.min) > d.min else d
            for k, d in meta.dynamic_dims.items()
        }
        user_inputs.append(dataclasses.replace(meta, dynamic_dims=dims))
    return dataclasses.replace(metadata, user_inputs=user_inputs)


def narrowed(metadata: Metadata, names: list[str]) -> list[str]:
    """One line per dim whose range is narrower than what was declared: torch.export
    proved less (`narrowed_by`), or small sizes did not replay."""
    lines = []
    for name, meta in zip(names, metadata.user_inputs):
        for k, d in meta.dynamic_dims.items():
            if d.narrowed_by is not None:
                declared = f"{_lo(d.declared_min, d.min)}..{_hi(d.declared_max, d.max)}"
                lines.append(f"input '{name}' dim {k} ({d.symbol}): declared {declared}, exported for "
                             f"{d.min}..{_hi(None, d.max)}: torch.export proved the graph only there ({d.narrowed_by})")
            elif d.declared_min is not None:
                lines.append(
                    f"input '{name}' dim {k} ({d.symbol}): declared from {d.declared_min}, accepted from {d.min} "
                    f"(size{'s' if d.min - d.declared_min > 1 else ''} {', '.join(map(str, range(d.declared_min, d.min)))} "
                    "did not replay as eager did)"
                )
    return lines


def _lo(declared: int | None, accepted: int) -> int:
    return accepted if declared is None else declared


def _hi(declared: int | None, accepted: int | None) -> str:
    value = accepted if declared is None else declared
    return "inf" if value is None else str(value)
