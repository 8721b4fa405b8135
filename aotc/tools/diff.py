"""`aotc diff`: what changed between two bundles, for a CI that compares every export
with the last release.

Changes come in kinds, each read from a different part of the bundles:

    signature  graphs added or removed; per graph, inputs and outputs (name, role, shape,
               dtype, dynamic ranges), input mutations and output aliasing (metadata.json)
    ops        per graph, how often each operator is called (aotc.bundle.summary.op_histogram)
    weights    tensors added, removed, reshaped or recast, and the largest change of each
               tensor whose bytes differ
    files      files added or removed, and files whose size or sha256 changed
    build      compiled artifacts' build fingerprints, and the aotc/torch/python versions
    outputs    (run=True only) both bundles loaded and run on OLD's golden inputs

Reading compares JSON, text and safetensors only: nothing is unpickled, loaded or run.
Only `run=True` loads the bundles (their graphs, compiled artifacts included) and calls
them, as `aotc.load` does.

The result classes are in aotc.tools.diff_change, the weight and output comparisons in
aotc.tools.diff_tensors.

Example::

    import aotc.tools.diff
    d = aotc.tools.diff.diff_bundles("release/mlp", "bundles/mlp")
    for change in d.changes:
        print(change.kind, change.text())
    d.exit_code(fail_on=("signature", "weights"))   # 1 if either kind changed, else 0
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path
from typing import Any

from aotc.bundle.files import Bundle
from aotc.bundle.schema import Slot, TensorMeta, to_json
from aotc.bundle.signing import signature_summary
from aotc.bundle.summary import describe
from aotc.errors import BundleError
from aotc.runtime.regional import is_regional
from aotc.tools.diff_change import (  # noqa: F401 (public here: cli.diff, users)
    KINDS,
    BundleDiff,
    Change,
    ChangeKind,
    Facts,
    keyed,
)
from aotc.tools.diff_tensors import tensor_change  # noqa: F401 (public here: tests, users)
from aotc.tools.diff_tensors import output_changes, weight_changes

# graph inputs that are weights.safetensors tensors
_STATE_ROLES = ("parameter", "buffer", "constant")
# manifest fields whose change is a change of the build, not of the model
_VERSIONS = ("format_version", "aotc_version", "torch_version", "python_version")


def diff_bundles(old: str | Path, new: str | Path, run: bool = False, trusted_subclasses=()) -> BundleDiff:
    """Compare the bundles at `old` and `new`; see the module docstring.

    A bundle that cannot be read (missing, damaged, hashes that do not match, a regional
    bundle) raises BundleError naming it and its side. With `run=True` both are loaded
    with `aotc.load` and called on OLD's golden inputs; `trusted_subclasses` is passed on.
    """
    a, b = _open(old, "old"), _open(new, "new")
    changes = signature_changes(a, b) + op_changes(a, b) + weight_changes(a, b) + file_changes(a, b)
    changes += build_changes(a, b) + signing_changes(a, b)
    skipped: list[str] = []
    if run:
        found, skipped = output_changes(a, b, trusted_subclasses)
        changes += found
    return BundleDiff(str(a.path), str(b.path), tuple(changes), tuple(skipped), ran=run)


def _open(path: str | Path, side: str) -> Bundle:

    if is_regional(path):
        raise BundleError(
            f"The {side} bundle '{path}' is a regional bundle (it has regions.json); aotc diff compares "
            "whole-model bundles. Compare its groups' bundles instead: aotc diff OLD/groups/g0 NEW/groups/g0."
        )
    try:
        return Bundle.open(path)  # every hash checked: a damaged bundle is not reported as "changed"
    except BundleError as e:
        raise BundleError(f"cannot read the {side} bundle: {e}") from e


def signing_changes(old: Bundle, new: Bundle) -> list[Change]:
    """A signature (model.sig) added or removed, or one by another key or over other files;
    `key` is the signing key's public-key hash, as the signature names it."""
    before, after = signature_summary(old.path), signature_summary(new.path)
    return keyed("signing", {"model.sig": before} if before else {}, {"model.sig": after} if after else {})


# ------------------------------------------------------------------------------- signature


def signature_changes(old: Bundle, new: Bundle) -> list[Change]:
    """Graphs added or removed, then per graph kind both have: inputs, outputs,
    mutations and aliases; then the model's mode, input/output structure and ambient state."""
    changes = keyed("signature", {k: None for k in old.graph_kinds}, {k: None for k in new.graph_kinds},
                     lambda k: f"graph {k}")
    for kind in (k for k in old.graph_kinds if k in new.graph_kinds):
        changes += _input_changes(old, new, kind)
        changes += keyed("signature", _output_facts(old, kind), _output_facts(new, kind),
                          lambda n: f"{kind}: output {n}")
        changes += keyed("signature", _mutations(old, kind), _mutations(new, kind),
                          lambda n: f"{kind}: mutation of {n}")
        changes += keyed("signature", _aliases(old, kind), _aliases(new, kind),
                          lambda n: f"{kind}: alias output {n}")
    changes += keyed("signature", _model_facts(old), _model_facts(new))
    return changes


def _tensor_facts(t: TensorMeta | None) -> Facts:
    """Shape and dtype; a dynamic dim shows as its range "min..max" ("2..inf": unbounded)
    rather than the example's size, which may change without changing what is accepted."""
    if t is None:
        return {}
    shape: list[Any] = list(t.shape)
    for dim, d in t.dynamic_dims.items():
        shape[int(dim)] = f"{d.min}..{'inf' if d.max is None else d.max}"
    return {"shape": shape, "dtype": t.dtype}


def _unique(names: list[str]) -> list[str]:
    """Slot names, with a repeated one numbered so that no slot hides another."""
    seen: Counter[str] = Counter()
    out = []
    for n in names:
        seen[n] += 1
        out.append(n if seen[n] == 1 else f"{n}#{seen[n]}")
    return out


def _slot_facts(slot: Slot, tensor: TensorMeta | None) -> Facts:
    facts = {"role": slot.role, "target": slot.target, "index": slot.index, **_tensor_facts(tensor)}
    return {k: v for k, v in facts.items() if v is not None}


def _input_facts(bundle: Bundle, kind: str) -> dict[str, Facts]:
    """The graph's inputs other than its weights, by slot name. A weight's name, shape and
    dtype are the weights kind's to report; here only its role, when it changes."""
    slots = bundle.signature.graphs[kind].inputs
    program = bundle.metadata.programs.get(kind)
    meta = {i.name: i.tensor for i in program.inputs} if program else {}
    facts = {}
    for key, slot in zip(_unique([s.name for s in slots]), slots):
        if slot.role in _STATE_ROLES:
            facts[key] = {"role": slot.role}
            continue
        if slot.role == "user_input" and slot.index is not None:
            tensor = bundle.metadata.user_inputs[slot.index]  # with the ranges the bundle accepts
        else:
            tensor = meta.get(slot.name)
        facts[key] = _slot_facts(slot, tensor)
    return facts


def _input_changes(old: Bundle, new: Bundle, kind: str) -> list[Change]:
    before, after = _input_facts(old, kind), _input_facts(new, kind)
    # a weight added or removed is reported once, by the weights kind
    before = {k: v for k, v in before.items() if k in after or v.get("role") not in _STATE_ROLES}
    after = {k: v for k, v in after.items() if k in before or v.get("role") not in _STATE_ROLES}
    return keyed("signature", before, after, lambda n: f"{kind}: input {n}")


def _output_facts(bundle: Bundle, kind: str) -> dict[str, Facts]:
    """The graph's outputs by slot name, but for mutated inputs' new values, which the
    mutations of the same graph report."""
    slots = bundle.signature.graphs[kind].outputs
    program = bundle.metadata.programs.get(kind)
    meta = {o.index: o.tensor for o in program.outputs} if program else {}
    return {
        key: _slot_facts(slot, meta.get(slot.index) if slot.role == "user_output" else None)
        for key, slot in zip(_unique([s.name for s in slots]), slots)
        if slot.role != "input_mutation"
    }


def _mutations(bundle: Bundle, kind: str) -> dict[str, Facts]:
    """Inputs the program mutates, by name."""
    program = bundle.metadata.programs.get(kind)
    if program is None:
        return {}
    return {
        i.name: {"mutation_type": i.mutation_type, "mutates_data": i.mutates_data,
                 "mutates_metadata": i.mutates_metadata}
        for i in program.inputs
        if i.mutation_type != "NOT_MUTATED" or i.mutates_data or i.mutates_metadata
    }


def _aliases(bundle: Bundle, kind: str) -> dict[str, Facts]:
    """User outputs that alias an input or intermediate, by output index."""
    program = bundle.metadata.programs.get(kind)
    if program is None:
        return {}
    return {str(o.index): {"output_type": o.output_type, "base": o.base}
            for o in program.outputs if o.output_type != "non_alias"}


def _model_facts(bundle: Bundle) -> dict[str, Any]:
    """What the whole bundle was captured as: mode, the pytree structure of forward's
    inputs and outputs (their specs are long JSON; a change is reported, not shown), and the
    global state of the capture."""

    sig, meta = bundle.signature, bundle.metadata
    return {
        "mode": "train" if meta.training else "eval",
        "user inputs": [u.name for u in sig.user_inputs],
        "number of user outputs": sig.num_user_outputs,
        "input structure (in_spec)": f"sha256 {_sha(sig.in_spec)}",
        "output structure (out_spec)": f"sha256 {_sha(sig.out_spec)}",
        "exported under": to_json(meta.ambient),
    }


def _sha(text: str) -> str:

    return hashlib.sha256(text.encode()).hexdigest()[:12]


# ------------------------------------------------------------------------------------- ops


def op_changes(old: Bundle, new: Bundle) -> list[Change]:
    """Per graph kind both bundles have: operators whose call count changed (0: absent)."""

    ops_old, ops_new = describe(old)["graphs"], describe(new)["graphs"]
    changes = []
    for kind in (k for k in ops_old if k in ops_new):
        before, after = ops_old[kind]["ops"], ops_new[kind]["ops"]
        for op in sorted({*before, *after}):
            n_old, n_new = before.get(op, 0), after.get(op, 0)
            if n_old != n_new:
                what = "added" if n_old == 0 else "removed" if n_new == 0 else "changed"
                changes.append(Change("ops", f"{kind}: {op}", what, old=n_old, new=n_new))
    return changes


# ----------------------------------------------------------------------------- files, build


def file_changes(old: Bundle, new: Bundle) -> list[Change]:
    """Every file the manifests list: added, removed, resized, or rewritten at the same size.
    Records (`aotc verify/bench --record`) are results about a bundle, not part of what it
    computes: recording on one side only is no change."""
    before = {f.path: f for f in old.manifest.files if f.kind != "record"}
    after = {f.path: f for f in new.manifest.files if f.kind != "record"}
    changes = []
    for path in dict.fromkeys([*before, *after]):
        a, b = before.get(path), after.get(path)
        if b is None:
            changes.append(Change("files", path, "removed", old={"bytes": a.size}))
        elif a is None:
            changes.append(Change("files", path, "added", new={"bytes": b.size}))
        elif a.size != b.size:
            changes.append(Change("files", path, "changed", old={"bytes": a.size}, new={"bytes": b.size}))
        elif a.sha256 != b.sha256:
            changes.append(Change("files", path, "changed", old={"sha256": a.sha256[:12]},
                                  new={"sha256": b.sha256[:12]}, note=f"same size, {a.size} bytes"))
    return changes


def build_changes(old: Bundle, new: Bundle) -> list[Change]:
    """Versions in the manifests, then, for each file both list with a build fingerprint
    (compiled artifacts, ONNX models), every fingerprint key that differs."""
    changes = keyed("build", {v: getattr(old.manifest, v) for v in _VERSIONS},
                     {v: getattr(new.manifest, v) for v in _VERSIONS})
    before = {f.path: f.build for f in old.manifest.files if f.build is not None}
    after = {f.path: f.build for f in new.manifest.files if f.build is not None}
    for path in (p for p in before if p in after):
        changes += keyed("build", before[path], after[path], lambda key: f"{path}: {key}")
    return changes
