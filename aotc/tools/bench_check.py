"""`aotc bench` checks what it times: each variant's first call, on the same inputs as the
timed ones, against eager's, before its figures count.

A variant's process records its first call (`record`): the flat outputs of an inference
call by verify's keys (`output[i]`), or the loss of a training step (under one seed, so
dropout draws alike). The driver compares every record with eager's, which the eager
baseline recorded in its own process, or, without that baseline, with the bundle's
reference (eager's results on the same golden inputs, from export), each entry within the
bundle's tolerance (`verdict`). A variant that differs is WRONG: its row says so, it counts
in no ratio, and `aotc bench` exits 1.
"""

from __future__ import annotations

import torch
from safetensors.torch import load_file, save_file

from aotc._torch_compat import pytree
from aotc.contract.outputs import plain_outputs
from aotc.contract.subclasses import dense_leaves
from aotc.tools.verify import compare

PASS = "pass"
WRONG = "WRONG"


def record(value, train: bool) -> dict[str, torch.Tensor]:
    """What a model variant's first call gave: its tensor outputs (inference) or its loss."""
    if train:
        return {"loss": value} if isinstance(value, torch.Tensor) else {}
    leaves = dense_leaves(pytree.tree_leaves(plain_outputs(value)))
    return {f"output[{i}]": o for i, o in enumerate(leaves) if isinstance(o, torch.Tensor)}


def raw_record(bundle, kind: str, outputs, train: bool) -> dict[str, torch.Tensor]:
    """The same from the raw runner's flat graph outputs: the user outputs by their slot
    names, or a joint graph's loss. A forward+backward raw step feeds ones as the outputs'
    gradients and has no loss: it records nothing."""
    if outputs is None:
        return {}
    slots = bundle.signature.graphs[kind].outputs
    role = "loss" if train else "user_output"
    return {("loss" if train else s.name): o for s, o in zip(slots, outputs) if s.role == role}


def save(found: dict[str, torch.Tensor], path: str) -> None:
    save_file({k: v.detach().cpu().contiguous().clone() for k, v in found.items()}, path)


def load(path) -> dict[str, torch.Tensor]:
    return load_file(str(path))


def from_reference(golden: dict[str, torch.Tensor], train: bool) -> dict[str, torch.Tensor]:
    """The entries of a bundle's reference a variant's record is compared with."""
    return {k: v for k, v in golden.items() if (k == "loss" if train else k.startswith("output["))}


def verdict(expected: dict[str, torch.Tensor], actual: dict[str, torch.Tensor], tolerances: dict) -> str:
    """"pass", "WRONG: ..." naming the first entries that differ (one eager has and the
    variant lacks among them), or "unchecked: ..." when there is nothing to compare."""
    if not expected:
        return "unchecked: no eager result to compare with (no eager baseline, no reference entry)"
    if not actual:
        return "unchecked: the raw runner's forward+backward step has no loss to compare"
    failed = [c for c in compare("bench", expected, actual, tolerances, None) if not c.passed]
    if not failed:
        return PASS
    said = [f"{c.name} {c.note or f'max abs {c.max_abs:.3g}'} (rtol {c.rtol:g}, atol {c.atol:g})" for c in failed[:3]]
    return f"{WRONG}: " + "; ".join(said) + (f"; {len(failed) - 3} more" if len(failed) > 3 else "")
