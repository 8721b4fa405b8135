"""Wrapper layer 5: put back what the functional graph returned as plain outputs.

Input and buffer mutations are applied to the caller's tensors (`copy_` for data,
`as_strided_` for metadata); outputs that aliased an input or an intermediate in eager
are rebuilt as real views of it. Built once per program; a program with no mutations and
no aliased outputs gets `trivial = True` and the caller skips this layer entirely.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from aotc.schema import GraphSignature, ProgramMeta

_PLAIN = {"non_alias", "unsafe_view_alias", "custom_function_view"}


@dataclass(frozen=True)
class Mutation:
    output: int  # position of the new value among graph outputs
    primal: int  # position of the mutated tensor among graph inputs
    data: bool
    metadata: bool
    hidden: bool  # apply without autograd (buffers, no_grad mutations, inference)


@dataclass(frozen=True)
class OutputPlan:
    output: int  # position among graph outputs
    kind: str
    base_idx: int | None
    view_offset: int | None
    same_as: int | None = None  # the same tensor as user output `same_as`
    view_of: int | None = None  # a view of user output `view_of`


class Epilogue:
    def __init__(self, meta: ProgramMeta, signature: GraphSignature, training: bool):
        names = [s.name for s in signature.outputs]
        primal_names = [s.name for s in signature.inputs]
        self.mutations = []
        for primal, info in enumerate(meta.inputs):
            if info.mutation_type != "MUTATED_OUT_GRAPH":
                continue
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
                )
            )
        user = {s.index: i for i, s in enumerate(signature.outputs) if s.role in ("user_output", "loss")}
        self.outputs = [
            OutputPlan(user[o.index], o.output_type, o.base_idx, o.view_offset, o.same_as_output, o.view_of_output)
            for o in meta.outputs
        ]
        self.bases = [i for i, s in enumerate(signature.outputs) if s.role == "intermediate_base"]
        self.grad_enabled_mutation = meta.grad_enabled_mutation
        self.trivial = (
            not self.mutations
            and all(o.kind in _PLAIN and o.same_as is None and o.view_of is None for o in self.outputs)
            and self.grad_enabled_mutation is None
        )

    def apply(self, primals: list, outs: list) -> list:
        for m in self.mutations:
            target, value = primals[m.primal], outs[m.output]
            with torch.no_grad() if m.hidden else torch.enable_grad():
                if m.metadata:
                    target.as_strided_(value.size(), value.stride(), value.storage_offset())
                if m.data:
                    target.copy_(value)
        # Plain outputs first: an alias may be a view of a later user output.
        results: list = [outs[p.output] if p.kind in _PLAIN else None for p in self.outputs]
        for i, plan in enumerate(self.outputs):
            raw = outs[plan.output]
            if plan.kind == "is_input":
                results[i] = primals[plan.base_idx]
            elif plan.kind == "alias_of_input":
                results[i] = _view_of(primals[plan.base_idx], raw, plan.view_offset)
            elif plan.kind == "alias_of_intermediate_base_is_user_output":
                results[i] = _view_of(results[plan.base_idx], raw, plan.view_offset)
            elif plan.kind not in _PLAIN:  # alias_of_intermediate, ..._save_as_output
                results[i] = _view_of(outs[self.bases[plan.base_idx]], raw, plan.view_offset)
            elif plan.same_as is not None:
                results[i] = results[plan.same_as]
            elif plan.view_of is not None:
                results[i] = _view_of(results[plan.view_of], raw, plan.view_offset)
        if self.grad_enabled_mutation is not None:
            torch.set_grad_enabled(self.grad_enabled_mutation)
        return results


def _view_of(base: torch.Tensor, raw: torch.Tensor, offset: int | None) -> torch.Tensor:
    """`raw`'s size and strides as a view of `base`, at the offset recorded at capture."""
    start = base.storage_offset() + (offset if offset is not None else raw.storage_offset())
    return base.as_strided(raw.size(), raw.stride(), start)
