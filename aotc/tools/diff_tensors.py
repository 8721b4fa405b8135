"""`aotc diff`'s tensor comparisons: weights.safetensors tensor by tensor, and (run=True)
both bundles' outputs on the old bundle's golden inputs.
"""

from __future__ import annotations

from typing import Any

import torch

import aotc
from aotc.bundle.files import Bundle
from aotc.errors import InputError
from aotc.tools.diff_change import Change, ChangeKind, _differing, keyed
from aotc.tools.observe import observe
from aotc.tools.reference import REFERENCE
from aotc.tools.verify import _golden, _golden_inputs


def weight_changes(old: Bundle, new: Bundle) -> list[Change]:
    """Tensors of weights.safetensors (parameters, buffers, constants; a tensor subclass as
    its `fqn:inner` tensors) added, removed, of another shape or dtype, or with other values."""
    w_old, w_new = old.weights(), new.weights()  # safetensors, checked against the metadata
    changes = keyed("weights", {n: _tensor_label(t) for n, t in w_old.items()},
                     {n: _tensor_label(t) for n, t in w_new.items()})
    reshaped = {c.subject for c in changes}
    for name in sorted(n for n in w_old.keys() & w_new.keys() if n not in reshaped):
        change = tensor_change("weights", name, w_old[name], w_new[name])
        if change is not None:
            changes.append(change)
    return changes


def tensor_change(kind: ChangeKind, subject: str, old, new) -> Change | None:
    """None when `old` and `new` hold the same bytes; else a Change with how much they differ.

    Shape or dtype differing is reported as such (no number). Otherwise `max_abs` is over
    the positions where both values are finite, in float64 (complex128 for complex), and
    positions where a NaN or inf appeared, went away or changed sign are counted in the note,
    so that a NaN never hides inside a small max_abs.
    """

    if old.shape != new.shape or old.dtype != new.dtype:
        return Change(kind, subject, "changed", *_differing(_tensor_label(old), _tensor_label(new)))
    if _same_bytes(old, new):
        return None
    wide = torch.complex128 if old.is_complex() else torch.float64
    a, b = old.detach().cpu().to(wide), new.detach().cpu().to(wide)
    finite = torch.isfinite(a) & torch.isfinite(b)
    delta = (b - a).abs()[finite]
    max_abs = delta.max().item() if delta.numel() else 0.0
    same_nonfinite = (a == b) | (torch.isnan(a) & torch.isnan(b))
    nonfinite = int((~finite & ~same_nonfinite).sum())
    note = f"{nonfinite} values became or stopped being NaN/inf" if nonfinite else (
        "bytes differ, values compare equal (e.g. -0.0 and 0.0)" if max_abs == 0 else "")
    return Change(kind, subject, "changed", max_abs=max_abs, note=note)


def _same_bytes(a, b) -> bool:

    def raw(t):
        return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)

    # bytes, not values: NaN == NaN here, and -0.0 differs from 0.0
    return torch.equal(raw(a), raw(b))


def output_changes(old: Bundle, new: Bundle, trusted=()) -> tuple[list[Change], list[str]]:
    """Both bundles loaded (`aotc.load`, backend auto, eval) and called on OLD's golden
    inputs (reference.safetensors); each output leaf of NEW against OLD's. Returns the
    changes and, when outputs could not be compared, why (never a silent pass)."""

    for side, bundle in (("old", old), ("new", new)):
        if "inference" not in bundle.graph_kinds or bundle.metadata.training:
            has = ", ".join(bundle.graph_kinds) + (", captured in train mode" if bundle.metadata.training else "")
            return [], [f"outputs: the {side} bundle '{bundle.path}' has no eval-mode inference graph (it has "
                        f"{has}); outputs are compared for inference bundles only."]
    if old.manifest.file(REFERENCE) is None:
        return [], [f"outputs: the old bundle '{old.path}' has no {REFERENCE} to take golden inputs from; "
                    "export it again with this aotc."]
    inputs = _golden_inputs(old, _golden(old), trusted)
    records = {}
    for side, bundle in (("old", old), ("new", new)):
        try:
            records[side] = _run(bundle, inputs, trusted)
        except InputError as e:
            return [], [f"outputs: the {side} bundle does not take the old bundle's golden inputs: {e}"]
    before, after = _outputs(records["old"]), _outputs(records["new"])
    changes = []
    for key in dict.fromkeys([*before, *after]):
        if key not in after:
            changes.append(Change("outputs", key, "removed", old=_tensor_label(before[key])))
        elif key not in before:
            changes.append(Change("outputs", key, "added", new=_tensor_label(after[key])))
        else:
            change = tensor_change("outputs", key, before[key], after[key])
            if change is not None:
                changes.append(change)
    return changes, []


def _run(bundle: Bundle, inputs, trusted) -> dict:

    module = aotc.load(bundle.path, trusted_subclasses=trusted)
    args, kwargs = inputs
    return observe(module, args, kwargs, [u.name for u in bundle.signature.user_inputs], "inference")


def _outputs(record: dict) -> dict:
    """The output leaves of an observe() record (it also holds inputs and buffers after the
    call; those are the weights and the signature's mutations, reported there)."""
    return {k: v for k, v in record.items() if k.startswith("output[")}  # aotc.tools.observe.output_key


def _tensor_label(t) -> dict[str, Any]:
    return {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")}
