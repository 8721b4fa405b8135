"""Wrapper layer 5: put back what the functional graph returned as plain outputs.

Input and buffer mutations are applied to the caller's tensors (`copy_` for data,
`as_strided_` for metadata, `set_` or `aten.shallow_copy_data_` for a storage swap);
outputs that aliased an input or an intermediate in eager are rebuilt as real views of it.
Built once per program; a program with no mutations and no aliased outputs gets
`trivial = True` and the caller skips this layer entirely.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from aotc import _torch_compat as tc
from aotc.bundle.schema import GraphSignature, ProgramMeta
from aotc.contract.call_inputs import constant_value
from aotc.errors import BundleError, InputError

_PLAIN = {"non_alias", "unsafe_view_alias", "custom_function_view"}


@dataclass(frozen=True)
class Mutation:
    output: int  # position of the new value among graph outputs
    primal: int  # position of the mutated tensor among graph inputs
    data: bool
    metadata: bool
    hidden: bool  # apply without autograd (buffers, no_grad mutations, inference)
    layout: tuple | None = None  # (size, stride, offset) after a metadata mutation, when static
    # a storage swap, replayed as AOTAutograd does: "set_", or "shallow_copy_data_" for a
    # `.data` assignment (which keeps the tensor's autograd identity and version counter)
    storage: str | None = None


@dataclass(frozen=True)
class OutputPlan:
    output: int  # position among graph outputs (-1 for a constant)
    kind: str  # the output type; "constant" and "scalar" for outputs that are not tensors
    base_idx: int | None
    view_offset: int | None
    same_as: int | None = None  # the same tensor as user output `same_as`
    view_of: int | None = None  # a view of user output `view_of`
    requires_grad: bool = False  # as eager's output did
    # alias_of_input: whether that input required grad at capture; the output's
    # requires_grad above holds for calls whose input does the same
    base_requires_grad: bool | None = None
    # sizes and strides eager's output had, when static: compiled backends (aoti, onnx)
    # return a fresh tensor, not a view laid out like eager's
    size: tuple | None = None
    stride: tuple | None = None
    # alias_of_input with static sizes: the input's strides at capture, which `size` and
    # `stride` assume; a caller's input laid out otherwise cannot take that view
    base_stride: tuple | None = None


class Epilogue:
    def __init__(self, meta: ProgramMeta, signature: GraphSignature, training: bool):
        names = [s.name for s in signature.outputs]
        primal_names = [s.name for s in signature.inputs]
        self.mutations = []
        for primal, info in enumerate(meta.inputs):
            if info.mutation_type != "MUTATED_OUT_GRAPH":
                continue
            storage = None
            if info.mutates_storage_metadata:
                storage = "shallow_copy_data_" if info.mutation_is_shallow_copy_data else "set_"
                if storage == "shallow_copy_data_" and not tc.has_shallow_copy_data():
                    raise BundleError(
                        f"input '{info.name}' of this bundle has its storage swapped by a .data assignment "
                        f"(aten.shallow_copy_data_, traced by torch 2.14 and later), which torch {torch.__version__} "
                        "cannot replay. Load the bundle under torch 2.14 or newer, or export it again here."
                    )
            self.mutations.append(
                Mutation(
                    output=names.index(f"mutated:{primal_names[primal]}"),
                    primal=primal,
                    data=info.mutates_data,
                    metadata=info.mutates_metadata,
                    hidden=not training
                    or info.kind == "buffer"
                    or info.mutations_hidden_from_autograd
                    or info.mutations_under_no_grad_or_inference_mode,
                    layout=(
                        (info.layout_after.shape, info.layout_after.stride, info.layout_after.storage_offset)
                        if info.layout_after else None
                    ),
                    storage=storage,
                )
            )
        # inputs traced as views of a synthetic base whose shape or strides changed
        self.user_metadata = [
            (i, s.index) for i, s in enumerate(signature.outputs) if s.name.startswith("mutated_metadata:")
        ]
        self.same_as_inputs = {int(k): v for k, v in meta.outputs_same_as_inputs.items()}
        user = {s.index: i for i, s in enumerate(signature.outputs) if s.role in ("user_output", "loss")}
        self.outputs = [
            OutputPlan(
                -1 if o.constant is not None else user[o.index],
                "constant" if o.constant is not None else "scalar" if o.scalar is not None else o.output_type, o.base_idx, o.view_offset, o.same_as_output, o.view_of_output,
                o.requires_grad, meta.inputs[o.base_idx].requires_grad if o.output_type == "alias_of_input" else None,
                *((tuple(o.tensor.shape), tuple(o.tensor.stride), _static_stride(meta, o))
                  if o.tensor and not o.tensor.dynamic_dims else ()),
            )
            for o in meta.outputs
        ]
        # outputs that are not tensors: constants the model returns, numbers the graph returns as 0-d tensors
        self._constants = [(i, constant_value((o.constant.type, o.constant.value)))
                           for i, o in enumerate(meta.outputs) if o.constant is not None]
        self._scalars = [(i, p.output) for i, p in enumerate(self.outputs) if p.kind == "scalar"]
        self.bases = [i for i, s in enumerate(signature.outputs) if s.role == "intermediate_base"]
        self.grad_enabled_mutation = meta.grad_enabled_mutation
        # built once: plain outputs taken as they are, then aliases in dependency order (an
        # alias may be a view of a later user output, which may itself alias an intermediate)
        self._plain = [(i, p.output) for i, p in enumerate(self.outputs) if p.kind in _PLAIN]
        self._aliases = [
            (i, p) for i, p in sorted(enumerate(self.outputs), key=lambda ip: _depends_on_outputs(ip[1]))
            if (p.kind not in _PLAIN or p.same_as is not None or p.view_of is not None)
            and p.kind not in ("constant", "scalar")
        ]
        self.trivial = (
            not self.mutations
            and not self.user_metadata
            and not self.same_as_inputs
            and all(o.kind in _PLAIN and o.same_as is None and o.view_of is None for o in self.outputs)
            and self.grad_enabled_mutation is None
        )

    def apply(self, primals: list, outs: list, flat: list) -> list:
        """`primals` are the graph's inputs, `flat` the caller's flat user inputs."""
        for m in self.mutations:
            target, value = primals[m.primal], outs[m.output]
            if value is target:  # written in place by the compiled graph (exporters/aoti_updates.py)
                continue
            if m.storage is not None:  # the new value holds the final data and layout
                with torch.no_grad():
                    if m.storage == "set_":
                        target.set_(value)
                    else:
                        torch.ops.aten.shallow_copy_data_(target, value)
                continue
            if m.metadata:
                # as AOTAutograd does: in the caller's grad mode, so that autograd sees
                # the input's new view of its storage (a leaf that requires grad cannot)
                size, stride, offset = m.layout or (value.size(), value.stride(), value.storage_offset())
                with torch.no_grad() if target.is_leaf and target.requires_grad else contextlib.nullcontext():
                    target.as_strided_(size, stride, offset)
            if m.data:
                if m.hidden and not target.requires_grad and not value.requires_grad:
                    target.copy_(value)  # records nothing either way; no_grad's context costs µs
                else:
                    with torch.no_grad() if m.hidden else torch.enable_grad():
                        target.copy_(value)
        for output, user in self.user_metadata:
            target, value = flat[user], outs[output]
            with torch.no_grad() if target.is_leaf and target.requires_grad else contextlib.nullcontext():
                target.as_strided_(value.size(), value.stride(), value.storage_offset())
        results: list = [None] * len(self.outputs)
        for i, output in self._plain:
            results[i] = outs[output]
        for i, value in self._constants:
            results[i] = value
        for i, output in self._scalars:
            results[i] = outs[output].item()
        for i, plan in self._aliases:
            raw = outs[plan.output]
            if plan.kind == "is_input":
                results[i] = primals[plan.base_idx]
            elif plan.kind == "alias_of_input":
                results[i] = _view_of(primals[plan.base_idx], raw, plan)
            elif plan.kind == "alias_of_intermediate_base_is_user_output":
                results[i] = _view_of(results[plan.base_idx], raw, plan)
            elif plan.kind not in _PLAIN:  # alias_of_intermediate, ..._save_as_output
                results[i] = _view_of(outs[self.bases[plan.base_idx]], raw, plan)
            elif plan.same_as is not None:
                results[i] = results[plan.same_as]
            elif plan.view_of is not None:
                results[i] = _view_of(results[plan.view_of], raw, plan)
        for i, user in self.same_as_inputs.items():
            results[i] = flat[user]
        if self.grad_enabled_mutation is not None:
            torch.set_grad_enabled(self.grad_enabled_mutation)
        return results


def _depends_on_outputs(plan: OutputPlan) -> bool:
    return plan.kind == "alias_of_intermediate_base_is_user_output" or plan.same_as is not None or plan.view_of is not None


def _static_stride(meta: ProgramMeta, out) -> tuple | None:
    """The strides the input an output views had after the call at capture."""
    if out.output_type != "alias_of_input":
        return None
    info = meta.inputs[out.base_idx]
    if info.mutates_metadata:  # the epilogue gives the input its new layout before the view
        return tuple(info.layout_after.stride) if info.layout_after else None
    return tuple(info.tensor.stride) if info.tensor is not None and not info.tensor.dynamic_dims else None


def _view_of(base: torch.Tensor, raw: torch.Tensor, plan: OutputPlan) -> torch.Tensor:
    """`raw` as a view of `base`, requiring grad as eager's output did (AOTAutograd's
    gen_alias_from_base). Where `raw` already views base's memory (the fx graph computed
    the view on the caller's tensor) it keeps that geometry; a compiled graph returns a
    fresh tensor, and the view takes eager's sizes and strides at the offset recorded at
    capture, which hold only for a base laid out as at capture."""
    if raw.untyped_storage().data_ptr() == base.untyped_storage().data_ptr():
        size, stride, start = raw.size(), raw.stride(), raw.storage_offset()
    else:
        if plan.base_stride is not None and _significant(base.size(), base.stride()) != _significant(
                base.size(), plan.base_stride):
            raise InputError(
                f"an input is laid out with strides {tuple(base.stride())}, unlike at export {plan.base_stride}, and "
                f"output {plan.output} is a view of it that the compiled graph cannot rebuild for that layout. Pass the "
                "input laid out as at export, or load the bundle with backend='fx'."
            )
        offset = plan.view_offset
        start = base.storage_offset() + (offset if offset is not None else raw.storage_offset())
        size, stride = (plan.size, plan.stride) if plan.size is not None else (raw.size(), raw.stride())
    out = base.as_strided(size, stride, start)
    if plan.base_requires_grad is not None and base.requires_grad != plan.base_requires_grad:
        return out  # a call unlike the capture: the view follows its base, as in eager
    if base.requires_grad and not plan.requires_grad:
        return out.detach()
    if not base.requires_grad and plan.requires_grad:
        out.requires_grad_(True)
    return out


def _significant(size, stride) -> tuple:
    """The strides of dims longer than 1 (the others say nothing about memory)."""
    return tuple(st for n, st in zip(size, stride) if n != 1)
