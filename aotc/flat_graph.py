"""Captured graphs re-exported as flat programs: `(inputs...) -> (outputs...)`.

AOTAutograd's graphs take nested arguments, return Nones and sizes, and read tensor
constants (made inside forward, e.g. `torch.tensor([])` in cache code) as attributes.
A flat program takes and returns tensors only, so it can be saved with
`torch.export.save`, compiled by AOTInductor and called with one argument list:

- constants become the graph's last inputs (`lift_constants`); the bundle stores them
  with the weights, the runtime passes them;
- Nones are dropped from the outputs and sizes travel as empty `(n, 0)` tensors.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.export import Dim, ExportedProgram

from aotc._torch_compat import pytree
from aotc.errors import CaptureError


def size_carrier(n) -> torch.Tensor:
    """An int as the first dim of an empty tensor (no memory), so it can cross a graph edge."""
    return torch.empty((n, 0))


def lift_constants(gm: torch.fx.GraphModule) -> tuple[torch.fx.GraphModule, list[tuple[str, torch.Tensor]]]:
    """A copy of `gm` with flat inputs, taking its tensor constants as extra last inputs.

    Returns the new module and the (attribute name, value) of each lifted constant, in
    input order.
    """
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))  # a plain Graph: positional inputs, any outputs
    constants = []
    last_input = list(graph.find_nodes(op="placeholder"))[-1]
    for node in list(graph.find_nodes(op="get_attr")):
        value = _attr(gm, node.target)
        if not isinstance(value, torch.Tensor):
            continue
        with graph.inserting_after(last_input):
            placeholder = graph.placeholder(f"constant_{len(constants)}")
        placeholder.meta["val"] = value
        last_input = placeholder
        node.replace_all_uses_with(placeholder)
        graph.erase_node(node)
        constants.append((node.target, value))
    return torch.fx.GraphModule(gm, graph), constants


def _attr(module: torch.nn.Module, target: str) -> Any:
    value = module
    for part in target.split("."):
        value = getattr(value, part)
    return value


class FlatCall(torch.nn.Module):
    """Calls a captured graph (made flat by `lift_constants`) and returns its non-None outputs.

    `fn` takes (inputs..., tangents..., constants...): the caller passes the inputs and
    constants, and for a joint graph (`tangents` given) the tangent of the loss is 1.
    Sizes saved for backward (symints) travel as empty `(n, 0)` tensors: AOTInductor
    packages take and return tensors only. `size_outputs` are output positions (after
    dropping Nones) to wrap that way, `size_inputs` input positions to unwrap.
    """

    def __init__(self, fn, keep: list[int], tangents: list[torch.dtype] | None = None,
                 size_outputs: frozenset[int] = frozenset(), size_inputs: frozenset[int] = frozenset(),
                 num_constants: int = 0):
        super().__init__()
        self.fn = fn
        self.keep = keep
        self.tangents = tangents or []  # joint graphs: the loss's dtype
        self.size_outputs = size_outputs
        self.size_inputs = size_inputs
        self.num_constants = num_constants

    def forward(self, *args):
        if self.size_inputs:
            args = tuple(a.shape[0] if i in self.size_inputs else a for i, a in enumerate(args))
        split = len(args) - self.num_constants
        tangents = [torch.ones((), dtype=dtype) for dtype in self.tangents]
        outs = self.fn(*args[:split], *tangents, *args[split:])
        outs = pytree.tree_flatten(outs, is_leaf=lambda x: x is None)[0]
        kept = [outs[i] for i in self.keep]
        return tuple(size_carrier(v) if i in self.size_outputs else v for i, v in enumerate(kept))


def export_dynamic_shapes(vals: list[Any], size_inputs: frozenset[int] = frozenset()) -> tuple | None:
    """torch.export dynamic_shapes for a flat graph, from its placeholders' fake values.

    Every symbolic dim (and saved size) becomes Dim.AUTO: the graph is already traced, so
    export only has to rediscover the relations between sizes. The user's ranges live in
    metadata.json, where the runtime checks them.
    """
    specs = []
    for i, v in enumerate(vals):
        symbolic = isinstance(v, torch.SymInt) and not v.node.expr.is_number
        if i in size_inputs:
            specs.append({0: Dim.AUTO} if symbolic else None)  # an (n, 0) size carrier
        elif symbolic:
            specs.append(Dim.AUTO)
        elif isinstance(v, torch.Tensor):
            dims = {i: Dim.AUTO for i, s in enumerate(v.shape) if isinstance(s, torch.SymInt) and not s.node.expr.is_number}
            specs.append(dims or None)
        else:
            specs.append(None)
    return (tuple(specs),) if any(s is not None for s in specs) else None


def reexport(fn, example_inputs: list[torch.Tensor], fake_vals: list[Any], kind: str,
             size_inputs: frozenset[int] = frozenset()) -> ExportedProgram:
    try:
        return torch.export.export(
            fn, tuple(example_inputs), dynamic_shapes=export_dynamic_shapes(fake_vals, size_inputs), strict=False
        )
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise CaptureError(
            f"the captured {kind} graph could not be exported as a flat program: "
            f"{type(e).__name__}: {first} Pass --debug for torch's full message."
        ) from e
