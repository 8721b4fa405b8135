"""Reading AOTAutograd's graphs: the per-input and per-output facts of metadata.json.

Capture hands this module AOTAutograd's graph (its placeholders and outputs carry
descriptors), its ViewAndMutationMeta, and what one eager call showed; it returns the
bundle's ProgramMeta: every input's mutations, every output's aliasing, the view layouts a
compiled backend cannot give back, and the aliasing between user inputs.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from aotc import _torch_compat as tc
from aotc._torch_compat import pytree
from aotc.bundle.schema import (
    AliasedInput,
    AliasGroup,
    ConstantValue,
    DynamicDim,
    InputMeta,
    Layout,
    OutputMeta,
    ProgramMeta,
    Slot,
    TensorMeta,
)
from aotc.capture import eager_check
from aotc.contract.call_inputs import CONSTANT_TYPES, constant_context
from aotc.contract.aliasing import geometry, storage_groups, synthetic_base
from aotc.errors import CaptureError


def _symbol_range(sym: torch.SymInt) -> tuple[str, int, int | None]:
    node = sym.node
    expr = node.expr
    vr = node.shape_env.var_to_range.get(expr) if expr.is_symbol else None
    lo = finite_int(vr.lower) if vr is not None else None
    hi = finite_int(vr.upper) if vr is not None else None
    return str(expr), lo or 0, hi


def finite_int(value: Any) -> int | None:
    """A sympy bound as an int; None for (int_)oo."""
    try:
        number = float(value)
    except (TypeError, ValueError, AttributeError):
        return None
    return int(number) if math.isfinite(number) else None


def _dynamic_dims(val: Any, declared: dict[str, tuple[int, int | None]] | None = None) -> dict[str, DynamicDim]:
    if not isinstance(val, torch.Tensor):
        return {}
    dims = {}
    for i, s in enumerate(val.shape):
        if isinstance(s, torch.SymInt) and not s.node.expr.is_number:
            name, lo, hi = _symbol_range(s)
            if declared and name in declared:
                lo, hi = declared[name]
            dims[str(i)] = DynamicDim(symbol=name, min=lo, max=hi)
    return dims


def traced_min(val: Any) -> dict[str, int]:
    """The smallest size the trace assumed for each symbol in `val`'s shape."""
    if not isinstance(val, torch.Tensor):
        return {}
    return {
        name: lo
        for s in val.shape
        if isinstance(s, torch.SymInt) and not s.node.expr.is_number
        for name, lo, _ in [_symbol_range(s)]
    }


def tensor_meta(real: torch.Tensor, fake: Any = None, declared: dict[str, tuple[int, int | None]] | None = None) -> TensorMeta:
    """`declared` overrides the trace's range per symbol with the one the export asked for."""
    return TensorMeta(
        shape=list(real.shape),
        stride=list(real.stride()),
        dtype=str(real.dtype).removeprefix("torch."),
        device=str(real.device),
        dynamic_dims=_dynamic_dims(fake, declared),
    )

def graph_placeholders(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return list(gm.graph.find_nodes(op="placeholder"))


def _output_node(gm: torch.fx.GraphModule) -> torch.fx.Node:
    return gm.graph.find_nodes(op="output")[0]


def output_descs(gm: torch.fx.GraphModule) -> list[Any]:
    descs = _output_node(gm).meta.get("desc")
    if descs and isinstance(descs[0], list):  # (outputs, grads) joint layout is pre-flattened
        descs = descs[0]
    return list(descs)


SCALAR_DTYPES = {"bool": torch.bool, "int": torch.int64, "float": torch.float64}


def scalar_type(value: Any) -> str | None:
    """"bool", "int" or "float" for a (symbolic) Python number a graph returns; else None."""
    if isinstance(value, (bool, torch.SymBool)):
        return "bool"
    if isinstance(value, (int, torch.SymInt)):
        return "int"
    if isinstance(value, (float, torch.SymFloat)):
        return "float"
    return None


def output_nodes(gm: torch.fx.GraphModule) -> list[Any]:
    args = _output_node(gm).args[0]
    flat, _ = pytree.tree_flatten(args, is_leaf=lambda x: x is None)
    return flat

# --------------------------------------------------------------------------- metadata


def _view_chain(node: Any, stop: set[Any]) -> tuple[list[str], int | None]:
    """View ops from the output's base (a node in `stop`, or a non-view) to `node`, and
    the output's storage offset relative to that base (None when symbolic)."""
    chain = []
    out = node
    while isinstance(node, torch.fx.Node) and node not in stop:
        target = node.target
        if not (isinstance(target, tc.OpOverload) and target.is_view):
            break
        rest = ", ".join(str(a) for a in node.args[1:])
        chain.append(f"{target}({rest})" if rest else str(target))
        node = node.args[0]
    offset = None
    out_val = out.meta.get("val") if isinstance(out, torch.fx.Node) else None
    base_val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if isinstance(out_val, torch.Tensor) and isinstance(base_val, torch.Tensor):
        delta = out_val.storage_offset() - base_val.storage_offset()
        offset = int(delta) if isinstance(delta, int) or not delta.node.expr.free_symbols else None
    return list(reversed(chain)), offset


def _intermediate_base(node: Any, base_nodes: list[Any], recorded: int | None) -> int:
    """Which intermediate base output `node` is a view of: the root of its view chain.
    (With synthetic bases, AOTAutograd's recorded index is remapped as if it were an
    input's, so the graph is the reliable source.)"""
    if isinstance(node, torch.fx.Node):
        chain, _ = _view_chain(node, set(base_nodes))
        root = _chain_root(node, len(chain))
        if root in base_nodes:
            return base_nodes.index(root)
    if recorded is not None and recorded < len(base_nodes):
        return recorded
    raise CaptureError("an output aliases an intermediate tensor aotc cannot locate in the graph")


def _relative_offset(node: Any, base: Any) -> int | None:
    """Storage offset of `node`'s value relative to `base`'s (None when unknown or symbolic)."""
    out_val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    base_val = base.meta.get("val") if isinstance(base, torch.fx.Node) else None
    if not (isinstance(out_val, torch.Tensor) and isinstance(base_val, torch.Tensor)):
        return None
    delta = out_val.storage_offset() - base_val.storage_offset()
    return int(delta) if isinstance(delta, int) or not delta.node.expr.free_symbols else None


def _layouts_after(gm: torch.fx.GraphModule) -> list[Layout | None]:
    """Per primal input: the static layout of its mutated value, where the graph returns one."""
    primals = [p for p in graph_placeholders(gm) if not isinstance(p.meta.get("desc"), tc.TangentAOTInput)]
    position = {p.meta.get("desc"): i for i, p in enumerate(primals)}
    layouts: list[Layout | None] = [None] * len(primals)
    for desc, node in zip(output_descs(gm), output_nodes(gm)):
        if not isinstance(desc, tc.InputMutationAOTOutput) or desc.mutated_input not in position:
            continue
        val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        if isinstance(val, torch.Tensor):
            values = [*val.shape, *val.stride(), val.storage_offset()]
            if all(isinstance(v, int) for v in values):
                layouts[position[desc.mutated_input]] = Layout(list(val.shape), list(val.stride()), val.storage_offset())
    return layouts


def _chain_root(node: torch.fx.Node, length: int) -> torch.fx.Node:
    for _ in range(length):
        node = node.args[0]
    return node


def build_program_meta(
    jd_gm: torch.fx.GraphModule,
    fw_metadata: Any,
    input_slots: list[Slot],
    real_inputs: list[torch.Tensor],
    fake_inputs: list[Any],
    real_outputs: list[Any],
    duplicates: dict[int, int],
    eager_views: dict[int, int] | None = None,
) -> ProgramMeta:
    """`eager_views`: user outputs that view one input in eager (output -> graph input
    position) where AOTAutograd calls them non-aliasing (views from multi-output ops like
    unbind, which it will not regenerate): the runtime rebuilds them as views."""
    layouts_after = _layouts_after(jd_gm)
    inputs = []
    for slot, info, real, fake, layout in zip(
        input_slots, fw_metadata.input_info, real_inputs, fake_inputs, layouts_after, strict=True
    ):
        inputs.append(
            InputMeta(
                kind=slot.role,
                name=slot.name,
                tensor=tensor_meta(real, fake),
                requires_grad=info.requires_grad,
                is_leaf=info.is_leaf,
                mutates_data=info.mutates_data,
                mutates_metadata=info.mutates_metadata,
                mutates_storage_metadata=info.mutates_storage_metadata,
                mutation_is_shallow_copy_data=tc.mutation_is_shallow_copy_data(info),
                mutations_hidden_from_autograd=info.mutations_hidden_from_autograd,
                mutations_under_no_grad_or_inference_mode=info.mutations_under_no_grad_or_inference_mode,
                mutation_type=info.mutation_type.name,
                layout_after=layout if info.mutates_metadata else None,
            )
        )

    descs = output_descs(jd_gm)
    nodes = output_nodes(jd_gm)
    user_out_nodes = {d.idx: n for d, n in zip(descs, nodes) if isinstance(d, tc.PlainAOTOutput)}
    base_nodes = [n for d, n in zip(descs, nodes) if isinstance(d, tc.IntermediateBaseAOTOutput)]
    placeholders = graph_placeholders(jd_gm)
    placeholder_nodes = set(placeholders)
    out_node_index = {}
    for i in sorted(user_out_nodes):
        out_node_index.setdefault(user_out_nodes[i], i)
    outputs = []
    # AOTAutograd lists metadata-mutated inputs of a synthetic base after the user outputs
    for i, info in enumerate(fw_metadata.output_info[: len(user_out_nodes)]):
        kind, base_idx = info.output_type.name, info.base_idx
        if kind == "non_alias" and i in (eager_views or {}):
            kind, base_idx = "alias_of_input", eager_views[i]
        if kind in ("alias_of_input", "is_input"):
            base, base_node = input_slots[base_idx].name, placeholders[base_idx]
        elif kind == "alias_of_intermediate_base_is_user_output":
            base, base_node = f"output[{base_idx}]", user_out_nodes.get(base_idx)
        elif kind.startswith("alias_of_intermediate"):
            base_idx = _intermediate_base(user_out_nodes.get(i), base_nodes, base_idx)
            base, base_node = f"intermediate_base[{base_idx}]", base_nodes[base_idx]
        else:
            base = base_node = None
        real = real_outputs[i] if i < len(real_outputs) else None
        node = user_out_nodes.get(i)
        chain, offset = [], None
        if base is not None and node is not None:
            chain, _ = _view_chain(node, placeholder_nodes)
            offset = _relative_offset(node, base_node)
        same_as = view_of = None
        if kind in ("non_alias", "unsafe_view_alias") and node is not None:
            if out_node_index.get(node, i) != i:
                same_as = out_node_index[node]
            else:
                root_chain, root_offset = _view_chain(node, set(out_node_index) - {node})
                root = _chain_root(node, len(root_chain))
                if root_chain and root in out_node_index and out_node_index[root] != i:
                    view_of, chain, offset = out_node_index[root], root_chain, root_offset
        outputs.append(
            OutputMeta(
                index=i,
                output_type=kind,
                base_idx=base_idx,
                base=base,
                requires_grad=info.requires_grad,
                tensor=tensor_meta(real, node.meta.get("val") if node is not None else None)
                if isinstance(real, torch.Tensor) and _scalar(node) is None
                else None,
                view_replay=chain,
                view_offset=offset,
                same_as_output=same_as,
                view_of_output=view_of,
                constant=_constant_output(i, user_out_nodes.get(i)),
                scalar=_scalar(node),
            )
        )
    return ProgramMeta(
        inputs=inputs,
        outputs=outputs,
        num_intermediate_bases=fw_metadata.num_intermediate_bases,
        duplicate_user_inputs={str(k): v for k, v in duplicates.items()},
        grad_enabled_mutation=fw_metadata.grad_enabled_mutation,
    )

def _constant_output(index: int, node: Any) -> ConstantValue | None:
    """A user output the graph does not compute (None, a number, a str): its value."""
    if isinstance(node, torch.fx.Node):
        return None
    if not isinstance(node, CONSTANT_TYPES):
        raise CaptureError(
            f"output {index} of the model is a {type(node).__name__}; a bundle returns tensors, numbers, bools, "
            "str and None. Return it as one of these, or leave it out."
        )
    return ConstantValue(*constant_context(node))


def _scalar(node: Any) -> str | None:
    return scalar_type(node.meta.get("val")) if isinstance(node, torch.fx.Node) else None


def eager_views(eager: eager_check.EagerCall, slots: list[Slot], aliased: list[list[int]]) -> dict[int, int]:
    """Outputs that view exactly one user input in eager -> that input's graph position."""
    position = {s.index: p for p, s in enumerate(slots) if s.role == "user_input"}
    on_base = members(aliased)
    return {
        k: position[j]
        for k, inputs in eager.shares_with_inputs.items()
        if len(inputs) == 1 and (j := next(iter(inputs))) in position and j not in on_base
    }


def members(groups: list[list[int]]) -> set[int]:
    return {i for group in groups for i in group}


def alias_groups(flat_user: list, slots: list[Slot]) -> list[AliasGroup]:
    """The storage each group of aliased user inputs shared at capture, and its synthetic
    base when AOTAutograd traced them on one."""
    bases = {s.index: s for s in slots if s.role == "synthetic_base"}
    groups = []
    for group in storage_groups(flat_user):
        members = [AliasedInput(i, *geometry(flat_user[i])) for i in group]
        slot = next((bases[i] for i in group if i in bases), None)
        if slot is None:
            groups.append(AliasGroup(members))
            continue
        owner = flat_user[slot.index]
        kind = "view_base" if owner._base is not None else "storage"
        base = AliasedInput(slot.index, *geometry(synthetic_base(owner)))
        groups.append(AliasGroup(members, slot.name, kind, base))
    return groups


def check_scalar_loss(joint: torch.fx.GraphModule) -> None:
    descs = output_descs(joint)
    nodes = output_nodes(joint)
    loss = next(n for d, n in zip(descs, nodes) if isinstance(d, tc.PlainAOTOutput))
    val = loss.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dim() != 0:
        found = f"a tensor of shape {tuple(val.shape)}" if isinstance(val, torch.Tensor) else type(val).__name__
        raise CaptureError(
            f"loss() returned {found}; a joint graph needs a scalar loss (shape ()). "
            "Reduce it, e.g. with .mean() or .sum()."
        )
