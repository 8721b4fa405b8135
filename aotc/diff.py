"""`aotc diff`: what changed between two bundles, for a CI that compares every export
with the last release.

Changes come in kinds, each read from a different part of the bundles:

    signature  graphs added or removed; per graph, inputs and outputs (name, role, shape,
               dtype, dynamic ranges), input mutations and output aliasing (metadata.json)
    ops        per graph, how often each operator is called (aotc.summary.op_histogram)
    weights    tensors added, removed, reshaped or recast, and the largest change of each
               tensor whose bytes differ
    files      files added or removed, and files whose size or sha256 changed
    build      compiled artifacts' build fingerprints, and the aotc/torch/python versions
    outputs    (run=True only) both bundles loaded and run on OLD's golden inputs

Reading compares JSON, text and safetensors only: nothing is unpickled, loaded or run.
Only `run=True` loads the bundles (their graphs, compiled artifacts included) and calls
them, as `aotc.load` does.

Example::

    import aotc.diff
    d = aotc.diff.diff_bundles("release/mlp", "bundles/mlp")
    for change in d.changes:
        print(change.kind, change.text())
    d.exit_code(fail_on=("signature", "weights"))   # 1 if either kind changed, else 0
"""

from __future__ import annotations

import dataclasses
import typing
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from aotc.bundle import Bundle
from aotc.errors import BundleError
from aotc.schema import Slot, TensorMeta

ChangeKind = Literal["signature", "ops", "weights", "files", "build", "outputs"]
KINDS: tuple[str, ...] = typing.get_args(ChangeKind)
What = Literal["added", "removed", "changed"]
# attribute -> value, e.g. {"role": "buffer", "shape": [8, "2..64"], "dtype": "float32"}
Facts = dict[str, Any]

# graph inputs that are weights.safetensors tensors
_STATE_ROLES = ("parameter", "buffer", "constant")
# manifest fields whose change is a change of the build, not of the model
_VERSIONS = ("format_version", "aotc_version", "torch_version", "python_version")


@dataclass(frozen=True)
class Change:
    """One difference between OLD and NEW.

    `subject` names what changed the way a person would ("inference: input x", a weight's
    FQN, a file's path). `old`/`new` are JSON values: None on the side where the subject
    is absent; for a changed subject with several attributes, dicts holding only the
    attributes that differ. `max_abs` is set for tensors (weights, outputs) of the same
    shape and dtype whose values differ: the largest |new - old| over the positions where
    both are finite; `note` says what that number leaves out (NaN or inf that appeared or
    went away), or why the bytes differ while the values do not.
    """

    kind: ChangeKind
    subject: str
    what: What
    old: Any = None
    new: Any = None
    max_abs: float | None = None
    note: str = ""

    def text(self) -> str:
        """One line for people: subject, then what happened to it."""
        if self.what == "added":
            body = "added" + (f" ({_show(self.new)})" if self.new is not None else "")
        elif self.what == "removed":
            body = "removed" + (f" (was {_show(self.old)})" if self.old is not None else "")
        elif self.max_abs is not None:
            body = f"max abs change {self.max_abs:.6g}"
        elif isinstance(self.old, dict) and isinstance(self.new, dict):
            body = "; ".join(f"{k} {_show(self.old.get(k))} -> {_show(self.new.get(k))}"
                             for k in dict.fromkeys([*self.old, *self.new]))
        else:
            body = f"{_show(self.old)} -> {_show(self.new)}"
        return f"{self.subject}: {body}" + (f" ({self.note})" if self.note else "")


@dataclass(frozen=True)
class BundleDiff:
    """Every change from the bundle at `old` to the one at `new`, in KINDS order.

    `skipped` says what was not compared and why (outputs of a bundle with no inference
    graph, say); `ran` is whether outputs were compared at all (run=True). The exit-code
    rule lives here: 1 when a change of a kind that counts was found, else 0.
    """

    old: str
    new: str
    changes: tuple[Change, ...]
    skipped: tuple[str, ...] = ()
    ran: bool = False

    def counts(self) -> dict[str, int]:
        """Changes per kind, only kinds that have some, in KINDS order."""
        found = Counter(c.kind for c in self.changes)
        return {k: found[k] for k in KINDS if found[k]}

    def exit_code(self, fail_on: typing.Iterable[str] = KINDS) -> int:
        return 1 if any(c.kind in set(fail_on) for c in self.changes) else 0

    def summary(self) -> str:
        """'3 changes: 2 weights, 1 ops', or 'no changes'."""
        if not self.changes:
            return "no changes"
        n = len(self.changes)
        return f"{n} change{'s' if n != 1 else ''}: " + ", ".join(f"{c} {k}" for k, c in self.counts().items())

    def to_json(self) -> dict[str, Any]:
        return {
            "old": self.old,
            "new": self.new,
            "ran": self.ran,
            "counts": self.counts(),
            "changes": [dataclasses.asdict(c) for c in self.changes],
            "skipped": list(self.skipped),
        }


def diff_bundles(old: str | Path, new: str | Path, run: bool = False, trusted_subclasses=()) -> BundleDiff:
    """Compare the bundles at `old` and `new`; see the module docstring.

    A bundle that cannot be read (missing, damaged, hashes that do not match, a regional
    bundle) raises BundleError naming it and its side. With `run=True` both are loaded
    with `aotc.load` and called on OLD's golden inputs; `trusted_subclasses` is passed on.
    """
    a, b = _open(old, "old"), _open(new, "new")
    changes = signature_changes(a, b) + op_changes(a, b) + weight_changes(a, b) + file_changes(a, b)
    changes += build_changes(a, b)
    skipped: list[str] = []
    if run:
        found, skipped = output_changes(a, b, trusted_subclasses)
        changes += found
    return BundleDiff(str(a.path), str(b.path), tuple(changes), tuple(skipped), ran=run)


def _open(path: str | Path, side: str) -> Bundle:
    from aotc.regional_bundle import is_regional

    if is_regional(path):
        raise BundleError(
            f"The {side} bundle '{path}' is a regional bundle (it has regions.json); aotc diff compares "
            "whole-model bundles. Compare its groups' bundles instead: aotc diff OLD/groups/g0 NEW/groups/g0."
        )
    try:
        return Bundle.open(path)  # every hash checked: a damaged bundle is not reported as "changed"
    except BundleError as e:
        raise BundleError(f"cannot read the {side} bundle: {e}") from e


# ------------------------------------------------------------------------------ keyed diffs


def _keyed(kind: ChangeKind, old: dict[str, Any], new: dict[str, Any], label=lambda key: key) -> list[Change]:
    """Changes between two mappings of subject -> value (a Facts dict or a plain value):
    keys on one side only are added/removed; a dict value reports only its differing keys."""
    changes = []
    for key in dict.fromkeys([*old, *new]):
        if key not in new:
            changes.append(Change(kind, label(key), "removed", old=old[key]))
        elif key not in old:
            changes.append(Change(kind, label(key), "added", new=new[key]))
        elif old[key] != new[key]:
            before, after = _differing(old[key], new[key])
            changes.append(Change(kind, label(key), "changed", old=before, new=after))
    return changes


def _differing(old: Any, new: Any) -> tuple[Any, Any]:
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return old, new
    keys = [k for k in dict.fromkeys([*old, *new]) if old.get(k) != new.get(k)]
    return {k: old.get(k) for k in keys}, {k: new.get(k) for k in keys}


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {_show(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return str(value)


# ------------------------------------------------------------------------------- signature


def signature_changes(old: Bundle, new: Bundle) -> list[Change]:
    """Graphs added or removed, then per graph kind both have: inputs, outputs,
    mutations and aliases; then the model's mode, input/output structure and ambient state."""
    changes = _keyed("signature", {k: None for k in old.graph_kinds}, {k: None for k in new.graph_kinds},
                     lambda k: f"graph {k}")
    for kind in (k for k in old.graph_kinds if k in new.graph_kinds):
        changes += _input_changes(old, new, kind)
        changes += _keyed("signature", _output_facts(old, kind), _output_facts(new, kind),
                          lambda n: f"{kind}: output {n}")
        changes += _keyed("signature", _mutations(old, kind), _mutations(new, kind),
                          lambda n: f"{kind}: mutation of {n}")
        changes += _keyed("signature", _aliases(old, kind), _aliases(new, kind),
                          lambda n: f"{kind}: alias output {n}")
    changes += _keyed("signature", _model_facts(old), _model_facts(new))
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
    return _keyed("signature", before, after, lambda n: f"{kind}: input {n}")


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
    from aotc.schema import to_json

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
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:12]


# ------------------------------------------------------------------------------------- ops


def op_changes(old: Bundle, new: Bundle) -> list[Change]:
    """Per graph kind both bundles have: operators whose call count changed (0: absent)."""
    from aotc.summary import describe

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


# --------------------------------------------------------------------------------- weights


def weight_changes(old: Bundle, new: Bundle) -> list[Change]:
    """Tensors of weights.safetensors (parameters, buffers, constants; a tensor subclass as
    its `fqn:inner` tensors) added, removed, of another shape or dtype, or with other values."""
    w_old, w_new = old.weights(), new.weights()  # safetensors, checked against the metadata
    changes = _keyed("weights", {n: _tensor_label(t) for n, t in w_old.items()},
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
    import torch

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
    import torch

    def raw(t):
        return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)

    # bytes, not values: NaN == NaN here, and -0.0 differs from 0.0
    return torch.equal(raw(a), raw(b))


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
    changes = _keyed("build", {v: getattr(old.manifest, v) for v in _VERSIONS},
                     {v: getattr(new.manifest, v) for v in _VERSIONS})
    before = {f.path: f.build for f in old.manifest.files if f.build is not None}
    after = {f.path: f.build for f in new.manifest.files if f.build is not None}
    for path in (p for p in before if p in after):
        changes += _keyed("build", before[path], after[path], lambda key: f"{path}: {key}")
    return changes


# --------------------------------------------------------------------------------- outputs


def output_changes(old: Bundle, new: Bundle, trusted=()) -> tuple[list[Change], list[str]]:
    """Both bundles loaded (`aotc.load`, backend auto, eval) and called on OLD's golden
    inputs (reference.safetensors); each output leaf of NEW against OLD's. Returns the
    changes and, when outputs could not be compared, why (never a silent pass)."""
    from aotc.errors import InputError
    from aotc.parity import _golden, _golden_inputs
    from aotc.reference import REFERENCE

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
    import aotc
    from aotc.observe import observe

    module = aotc.load(bundle.path, trusted_subclasses=trusted)
    args, kwargs = inputs
    return observe(module, args, kwargs, [u.name for u in bundle.signature.user_inputs], "inference")


def _outputs(record: dict) -> dict:
    """The output leaves of an observe() record (it also holds inputs and buffers after the
    call; those are the weights and the signature's mutations, reported there)."""
    return {k: v for k, v in record.items() if k.startswith("output[")}  # aotc.observe.output_key


def _tensor_label(t) -> dict[str, Any]:
    return {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")}
