"""Tensor subclasses at capture: the dense view of a model, as AOTAutograd's
`aot_dispatch_subclass` makes it.

AOTAutograd traces a model whose parameters, buffers, inputs or outputs are traceable
wrapper subclasses into a graph of their inner ("dense") tensors, and describes each
graph input and output with a descriptor wrapped in `SubclassGetAttr...` (the
parameter `w`'s inner `a`). aotc's capture runs on that dense view throughout:

- user inputs: each subclass leaf becomes a dict of its inner tensors, named `x:a`;
- parameters and buffers: `w:a` in the graphs and in weights.safetensors;
- outputs: each subclass leaf becomes its inner tensors, numbered in flatten order;
- `desugar` rewrites AOTAutograd's descriptors into plain ones over those names and
  positions, so the rest of capture (metadata, slots, partitioning, flat programs) sees
  plain tensors only.

The bundle's `metadata.subclasses` (schema.Subclasses) says how to rebuild each
subclass; the runtime does so at the edges (aotc.runtime.subclasses).
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch

from aotc import _torch_compat as tc
from aotc._torch_compat import pytree
from aotc.bundle.subclasses_schema import Subclasses, SubclassTensor
from aotc.contract.aliasing import geometry, storage_groups
from aotc.contract.subclasses import (
    Rebuilder,
    class_name,
    describe,
    encode_context,
    inner_names,
    inner_paths,
    is_subclass,
    plain_tensors,
)
from aotc.errors import CaptureError


def _as_dict(t: torch.Tensor) -> dict:
    """A subclass as nested dicts of its plain tensors: its place in the dense input tree."""
    return {a: _as_dict(getattr(t, a)) if is_subclass(getattr(t, a)) else getattr(t, a)
            for a in t.__tensor_flatten__()[0]}


@dataclass
class SubclassPlan:
    """Where the subclasses of one capture are, and how the dense view maps to the caller's.

    Inputs are known up front; outputs once the dense program has run (`record_outputs`).
    """

    state: dict[str, SubclassTensor]  # parameter/buffer FQN -> its description
    inputs: dict[int, SubclassTensor]  # outer flat user input -> its description
    builders: dict[int, Rebuilder]
    outer_names: list[str]
    outer_in_spec: pytree.TreeSpec
    dense_start: list[int]  # outer flat user input -> its first dense position
    outputs: dict[int, SubclassTensor] = field(default_factory=dict)
    out_dense_start: list[int] = field(default_factory=list)
    outer_out_spec: pytree.TreeSpec | None = None
    dense_out_spec: pytree.TreeSpec | None = None
    desugared: dict[int, Any] = field(default_factory=dict)  # descriptors already in the dense view
    state_grads: dict[str, SubclassTensor] = field(default_factory=dict)
    input_grads: dict[int, SubclassTensor] = field(default_factory=dict)
    # outer subclass inputs whose sizes, strides or offset the eager call changed in place
    metadata_mutated: set[int] = field(default_factory=set)

    # ------------------------------------------------------------- inputs

    def dense_inputs(self, flat_outer: list) -> list:
        """Outer flat inputs -> dense flat inputs."""
        dense = []
        for i, t in enumerate(flat_outer):
            dense.extend(self.builders[i].plain(t) if i in self.inputs else [t])
        return dense

    def dense_tree(self, flat_outer: list):
        """(args, kwargs) with every subclass input as a dict of its inner tensors."""
        leaves = [_as_dict(t) if i in self.inputs else t for i, t in enumerate(flat_outer)]
        return pytree.tree_unflatten(leaves, self.outer_in_spec)

    def dense_names(self) -> list[str]:
        names = []
        for i, name in enumerate(self.outer_names):
            names.extend(inner_names(name, self.inputs[i]) if i in self.inputs else [name])
        return names

    def outer_inputs(self, dense: list) -> list:
        """Dense flat inputs -> outer flat inputs (subclasses rebuilt around the same tensors)."""
        outer = []
        for i in range(len(self.outer_names)):
            start = self.dense_start[i]
            if i in self.builders:
                b = self.builders[i]
                t = b.build(dense[start : start + b.count])
                if self.inputs[i].requires_grad and t.is_leaf and not t.requires_grad:
                    t.requires_grad_(True)
                outer.append(t)
            else:
                outer.append(dense[start])
        return outer

    def dense_index(self, outer: int, path: tuple[str, ...]) -> int:
        if outer not in self.inputs:
            if path:
                raise CaptureError(f"AOTAutograd reads an inner tensor of input '{self.outer_names[outer]}', "
                                   "which is a plain tensor")
            return self.dense_start[outer]
        return self.dense_start[outer] + _position(inner_paths(self.inputs[outer]), path, self.outer_names[outer])

    # ------------------------------------------------------------- outputs

    def record_outputs(self, outputs: Any) -> Any:
        """The program's outputs in the dense view (subclass leaves as their inner
        tensors), recording their layout the first time."""
        leaves, spec = pytree.tree_flatten(outputs)
        if self.outer_out_spec is None:
            self.outer_out_spec = spec
            self.outputs = {k: describe(t, f"output {k}") for k, t in enumerate(leaves) if is_subclass(t)}
            starts, at = [], 0
            for k, t in enumerate(leaves):
                starts.append(at)
                at += len(inner_paths(self.outputs[k])) if k in self.outputs else 1
            self.out_dense_start = starts
        dense = [_as_dict(t) if is_subclass(t) else t for t in leaves]
        tree = pytree.tree_unflatten(dense, spec)
        if self.dense_out_spec is None:
            self.dense_out_spec = pytree.tree_flatten(tree)[1]
        return tree

    def dense_output(self, outer: int, path: tuple[str, ...]) -> int:
        if outer not in self.outputs:
            if path:
                raise CaptureError(f"AOTAutograd reads an inner tensor of output {outer}, which is a plain tensor")
            return self.out_dense_start[outer]
        return self.out_dense_start[outer] + _position(inner_paths(self.outputs[outer]), path, f"output {outer}")

    def schema(self) -> Subclasses:
        return Subclasses(
            state=self.state,
            inputs={str(k): v for k, v in self.inputs.items()},
            outputs={str(k): v for k, v in self.outputs.items()},
            in_spec=pytree.treespec_dumps(self.outer_in_spec),
            out_spec=pytree.treespec_dumps(self.outer_out_spec),
            input_names=self.outer_names,
            state_grads=self.state_grads,
            input_grads={str(k): v for k, v in self.input_grads.items()},
        )

    def record_grads(self, grad_metas: list[tuple[Any, Any]]) -> None:
        """How AOTAutograd rebuilds each subclass gradient: (input descriptor,
        SubclassCreationMeta or PlainTensorMeta) per traced input."""
        for desc, meta in grad_metas:
            if not hasattr(meta, "attrs"):
                continue  # a plain gradient (desugar refuses one for a subclass input)
            described = _grad_meta(meta)
            if isinstance(desc, (tc.ParamAOTInput, tc.BufferAOTInput)):
                name = desc.target.removeprefix("model.")
                of, grads, key = self.state.get(name), self.state_grads, name
            elif isinstance(desc, tc.PlainAOTInput):
                name = self.outer_names[desc.idx]
                of, grads, key = self.inputs.get(desc.idx), self.input_grads, desc.idx
            else:
                continue
            if of is None or inner_paths(of) != inner_paths(described):
                raise CaptureError(
                    f"the gradient of '{name}' is a {described.class_name.rpartition(':')[2]} with inner tensors "
                    f"{inner_paths(described)}, unlike '{name}' itself; aotc replays gradients with the structure "
                    f"of what they are the gradient of. Freeze '{name}', or make its gradient the same subclass."
                )
            grads[key] = described


def _grad_meta(meta: Any) -> SubclassTensor:
    """AOTAutograd's SubclassCreationMeta as aotc's SubclassTensor."""

    example = meta.original_subclass
    cls = meta.original_subclass_type or type(example)
    return SubclassTensor(
        class_name=class_name(cls),
        context=encode_context(meta.meta),
        inner={a: _grad_meta(m) if hasattr(m, "attrs") else None for a, m in meta.attrs.items()},
        shape=[int(s) for s in meta.outer_size],
        stride=[int(s) for s in meta.outer_stride],
        dtype=str(example.dtype).removeprefix("torch."),
    )


def _position(paths: list[tuple[str, ...]], path: tuple[str, ...], name: str) -> int:
    if path not in paths:
        raise CaptureError(f"AOTAutograd reads inner tensor {':'.join(path)} of '{name}', which its "
                           f"__tensor_flatten__ does not list ({', '.join(':'.join(p) for p in paths)})")
    return paths.index(path)


def plan(model: torch.nn.Module, flat_user: list, user_names: list[str], in_spec) -> SubclassPlan | None:
    """The subclass plan of a capture, or None when every tensor is plain (the usual case)."""
    state = {}
    for fqn, t in [*model.named_parameters(), *model.named_buffers()]:
        if is_subclass(t):
            state[fqn] = describe(t, fqn)
    inputs = {i: describe(t, user_names[i]) for i, t in enumerate(flat_user) if is_subclass(t)}
    if not state and not inputs:
        return None
    starts, at = [], 0
    for i in range(len(flat_user)):
        starts.append(at)
        at += len(inner_paths(inputs[i])) if i in inputs else 1
    return SubclassPlan(
        state=state, inputs=inputs, builders={i: Rebuilder.of(flat_user[i]) for i in inputs},
        outer_names=list(user_names), outer_in_spec=in_spec, dense_start=starts,
    )


def refuse_unsupported(plan: SubclassPlan, mode: str, duplicates: dict[int, int], flat_user: list,
                       user_names: list[str]) -> None:
    """Refuses, by name, a subclass capture the runtime could not replay on the caller's objects."""
    if plan.metadata_mutated:
        # torch 2.13's AOTAutograd refuses this itself; 2.14's traces it over the inner
        # tensors alone, and the caller's own subclass object would keep its old layout
        names = ", ".join(plan.outer_names[i] for i in sorted(plan.metadata_mutated))
        raise CaptureError(
            f"forward changes the sizes or strides of tensor subclass input {names} in place (as t_(), "
            "unsqueeze_() or as_strided_() do); aotc cannot replay that on the caller's subclass object. "
            "Return the changed tensor instead (x = x.t()) and use the output."
        )
    if mode == "joint" and plan.outputs:
        raise CaptureError(
            f"the loss is a {plan.outputs[0].class_name.rpartition(':')[2]}; a joint graph needs a plain scalar "
            "loss. Reduce the subclass to a plain tensor in loss(), or export forward+backward graphs (--autograd)."
        )
    if mode == "joint" and any(m.requires_grad for m in plan.inputs.values()):
        raise CaptureError(
            "a joint graph fills .grad of parameters and plain inputs; a tensor subclass input that requires "
            "grad needs forward+backward graphs (--autograd), whose backward rebuilds its gradient."
        )
    if duplicates or storage_groups(flat_user):
        names = sorted({user_names[i] for group in storage_groups(flat_user) for i in group} |
                       {user_names[i] for i in duplicates})
        raise CaptureError(
            f"inputs {', '.join(names)} share memory in a model with tensor subclasses; aotc captures "
            "subclass models with inputs that are separate tensors. Pass separate tensors."
        )


def dense_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Parameters and buffers with each subclass as its plain tensors, `fqn:attr`."""
    out = {}
    for fqn, t in state.items():
        if is_subclass(t):
            out.update(zip(inner_names(fqn, describe(t, fqn)), (p.detach() for p in plain_tensors(t))))
        else:
            out[fqn] = t
    return out


class DenseProgram(torch.nn.Module):
    """The capture Program seen densely: takes the dense input tree, rebuilds the
    subclass inputs, and returns its outputs with subclass leaves as their inner tensors.
    Used for the eager observation of a capture, which compares plain tensors."""

    def __init__(self, program: torch.nn.Module, subclass_plan: SubclassPlan):
        super().__init__()
        self.program = program
        self.plan = subclass_plan

    def forward(self, *args, **kwargs):
        dense = pytree.tree_leaves((args, kwargs))
        outer = self.plan.outer_inputs(dense)
        before = {i: geometry(outer[i]) for i in self.plan.inputs}
        outer_args, outer_kwargs = pytree.tree_unflatten(outer, self.plan.outer_in_spec)
        outputs = self.plan.record_outputs(self.program(*outer_args, **outer_kwargs))
        self.plan.metadata_mutated |= {i for i, g in before.items() if geometry(outer[i]) != g}
        return outputs

    def __deepcopy__(self, memo):
        # the plan is shared: the eager observation runs a copy and records the outputs
        return DenseProgram(copy.deepcopy(self.program, memo), self.plan)


# --------------------------------------------------------------------- descriptors


def desugar(gm: torch.fx.GraphModule, subclass_plan: SubclassPlan) -> None:
    """Rewrite the descriptors of `gm`'s placeholders and outputs (in place) into plain
    ones over the dense view: `SubclassGetAttrAOTInput(ParamAOTInput('w'), 'a')` becomes
    `ParamAOTInput('w:a')`, user inputs and outputs are renumbered densely."""
    for node in gm.graph.find_nodes(op="placeholder"):
        node.meta["desc"] = _maybe_push(node.meta.get("desc"), subclass_plan)
    out = gm.graph.find_nodes(op="output")[0]
    descs = out.meta.get("desc")
    if descs is None:
        return
    if descs and isinstance(descs[0], list):
        out.meta["desc"] = [[_maybe_push(d, subclass_plan) for d in group] for group in descs]
    else:
        out.meta["desc"] = [_maybe_push(d, subclass_plan) for d in descs]


def _maybe_push(desc, subclass_plan: SubclassPlan):
    """`desc` in the dense view; the partitioned graphs share descriptors with the joint
    one, so each is rewritten once."""
    if desc is None or id(desc) in subclass_plan.desugared:
        return desc
    dense = _push(desc, (), subclass_plan)
    subclass_plan.desugared[id(dense)] = dense  # kept alive, so the id stays its own
    return dense


def _push(desc: Any, path: tuple[str, ...], p: SubclassPlan) -> Any:
    """`desc` with the inner-tensor `path` pushed down to the parameter, input or output it is of."""
    if isinstance(desc, (tc.SubclassGetAttrAOTInput, tc.SubclassGetAttrAOTOutput)):
        return _push(desc.base, (desc.attr, *path), p)
    if isinstance(desc, (tc.ParamAOTInput, tc.BufferAOTInput)):
        fqn = desc.target.removeprefix("model.")
        if fqn in p.state:
            if not path:
                raise CaptureError(f"the gradient of '{fqn}' ({p.state[fqn].class_name}) is a plain tensor; "
                                   "aotc rebuilds a subclass's gradient as that subclass. Freeze it, or make "
                                   "its gradient the same subclass.")
            _position(inner_paths(p.state[fqn]), path, fqn)
            return dataclasses.replace(desc, target=":".join((desc.target, *path)))
        if path:
            raise CaptureError(f"the gradient of '{fqn}' is a tensor subclass while '{fqn}' is a plain tensor "
                               "(it meets a subclass in forward); aotc replays gradients with the structure of "
                               "what they are the gradient of. Make '{fqn}' the same subclass, or freeze it.")
        return desc
    if isinstance(desc, tc.PlainAOTInput):
        return dataclasses.replace(desc, idx=p.dense_index(desc.idx, path))
    if isinstance(desc, tc.PlainAOTOutput):
        return dataclasses.replace(desc, idx=p.dense_output(desc.idx, path))
    if isinstance(desc, tc.TangentAOTInput):
        return dataclasses.replace(desc, output=_push(desc.output, path, p))
    if isinstance(desc, tc.GradAOTOutput):
        return dataclasses.replace(desc, grad_of=_push(desc.grad_of, path, p))
    if isinstance(desc, tc.InputMutationAOTOutput):
        return dataclasses.replace(desc, mutated_input=_push(desc.mutated_input, path, p))
    if type(desc).__name__.startswith("Subclass"):
        raise CaptureError(
            f"AOTAutograd takes {desc!r}: a dynamic size or stride of a tensor subclass. aotc captures "
            "subclass tensors with static shapes; drop their dynamic dims."
        )
    if not path:
        for name in ("base_of", "output", "mutated_input"):
            inner = getattr(desc, name, None)
            if inner is not None and dataclasses.is_dataclass(inner):
                return dataclasses.replace(desc, **{name: _push(inner, (), p)})
        return desc
    raise CaptureError(
        f"AOTAutograd describes a graph value as {desc!r} inside a tensor subclass; aotc cannot "
        "replay that (dynamic sizes of a subclass, or a subclass intermediate aliased by an output)."
    )


def with_outer_requires_grad(fw_metadata: Any, gm: torch.fx.GraphModule, p: SubclassPlan) -> Any:
    """AOTAutograd's dense metadata with each inner tensor requiring grad as its subclass
    does (its inner tensors themselves never do: autograd sees the subclass)."""
    outer_of = {d: i for i in range(len(p.outer_names)) for d in range(p.dense_start[i], p.dense_start[i] + (
        len(inner_paths(p.inputs[i])) if i in p.inputs else 1))}
    infos = []
    primals = [n for n in gm.graph.find_nodes(op="placeholder") if not isinstance(n.meta.get("desc"), tc.TangentAOTInput)]
    for node, info in zip(primals, fw_metadata.input_info, strict=True):
        desc = node.meta.get("desc")
        outer = None
        if isinstance(desc, (tc.ParamAOTInput, tc.BufferAOTInput)):
            outer = p.state.get(desc.target.removeprefix("model.").partition(":")[0])
        elif isinstance(desc, tc.PlainAOTInput):
            outer = p.inputs.get(outer_of[desc.idx])
        if outer is not None and outer.requires_grad and not info.requires_grad:
            info = dataclasses.replace(info, requires_grad=True)
        infos.append(info)
    updated = copy.copy(fw_metadata)
    updated.input_info = infos
    return updated
