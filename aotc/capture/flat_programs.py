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

import difflib
import io
import operator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.export import Dim, ExportedProgram

from aotc import _torch_compat as tc
from aotc._torch_compat import pytree
from aotc.bundle.schema import BackwardSignature, GraphSignature, Slot
from aotc.capture import graph_fixes
from aotc.capture.metadata import SCALAR_DTYPES, graph_placeholders, output_descs, output_nodes, scalar_type
from aotc.capture.slot_names import Names, input_name, output_slot
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
    inputs = list(graph.find_nodes(op="placeholder"))
    last_input = inputs[-1] if inputs else None  # a program may take no inputs at all
    for node in list(graph.find_nodes(op="get_attr")):
        value = _attr(gm, node.target)
        if not isinstance(value, torch.Tensor):
            continue
        where = graph.inserting_after(last_input) if last_input is not None else graph.inserting_before(next(iter(graph.nodes)))
        with where:
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
                 num_constants: int = 0, scalar_outputs: dict[int, torch.dtype] | None = None):
        super().__init__()
        self.fn = fn
        self.keep = keep
        self.tangents = tangents or []  # joint graphs: the loss's dtype
        self.size_outputs = size_outputs
        self.size_inputs = size_inputs
        self.num_constants = num_constants
        # user outputs that are Python numbers (`.item()`): returned as 0-d tensors of this
        # dtype, which the runtime turns back into numbers (OutputMeta.scalar)
        self.scalar_outputs = scalar_outputs or {}

    def forward(self, *args):
        if self.size_inputs:
            args = tuple(a.shape[0] if i in self.size_inputs else a for i, a in enumerate(args))
        split = len(args) - self.num_constants
        tangents = [torch.ones((), dtype=dtype) for dtype in self.tangents]
        outs = self.fn(*args[:split], *tangents, *args[split:])
        outs = pytree.tree_flatten(outs, is_leaf=lambda x: x is None)[0]
        kept = [outs[i] for i in self.keep]
        if not kept:  # torch.export.save cannot write a program without outputs (see kept_outputs)
            return (torch.empty(0),)
        return tuple(
            size_carrier(v) if i in self.size_outputs
            else torch.scalar_tensor(v, dtype=self.scalar_outputs[i]) if i in self.scalar_outputs else v
            for i, v in enumerate(kept)
        )


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
    def export():
        return torch.export.export(
            fn, tuple(example_inputs), dynamic_shapes=export_dynamic_shapes(fake_vals, size_inputs), strict=False
        )

    try:
        try:
            program = export()
        except ValueError as e:
            if not str(e).startswith("Cannot view a tensor") or not graph_fixes.views_as_reshapes(fn.fn):
                raise
            program = export()
        graph_fixes.savable(program)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise CaptureError(
            f"the captured {kind} graph could not be exported as a flat program: "
            f"{type(e).__name__}: {first}"
        ) from e
    unbacked = tc.unbacked_sizes(program)
    if unbacked:  # torch.export.load rebuilds these sizes' bindings, and refuses some graphs it wrote
        buffer = io.BytesIO()
        try:
            torch.export.save(program, buffer)
        except Exception:  # not writable at all: the bundle's writer says so in its own words
            return program
        try:
            buffer.seek(0)
            tc.export_load(buffer)
        except Exception as e:
            raise CaptureError(
                f"the captured {kind} graph has sizes that depend on data ({', '.join(unbacked)}), and "
                f"torch.export.load cannot read back the program torch.export.save writes of it "
                f"({type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}). "
                "Export an inference graph, or keep data-dependent sizes (boolean-mask indexing, "
                "nonzero()) out of the model's training path."
            ) from e
    return program


# ------------------------------------------------- where each op came from

def module_stacks(gm: torch.fx.GraphModule) -> dict[int, dict]:
    """The user-model module stack of each forward op of a captured graph, by seq_nr: the
    key autograd gives an op and the backward ops it produces."""
    stacks: dict[int, dict] = {}
    for node in gm.graph.nodes:
        stack = _user_stack(node.meta.get("nn_module_stack"))
        if stack and node.meta.get("seq_nr") is not None:
            stacks.setdefault(node.meta["seq_nr"], stack)
    return stacks


def carry_module_stacks(gm: torch.fx.GraphModule, program: ExportedProgram, forward_stacks: dict[int, dict]) -> None:
    """Give the re-exported program's ops the module stacks of the captured graph's ops.

    Re-exporting through FlatCall would leave every op in FlatCall; `aotc report` groups
    ops by the user's modules. Ops are paired by aligning the two graphs' sequences of
    targets (export adds size ops for dynamic dims, so positions shift). A backward op
    takes the stack of the forward op it differentiates (same seq_nr), and a joint
    graph's backward ops are marked `custom["aotc_phase"] = "backward"`. Only metadata
    changes: what the graph computes does not.
    """
    source = [n for n in gm.graph.nodes if _aligned(n)]
    target = [n for n in program.graph.nodes if _aligned(n)]
    for node in program.graph.nodes:
        node.meta.pop("nn_module_stack", None)  # FlatCall's, which says nothing
    matcher = difflib.SequenceMatcher(None, [str(n.target) for n in source], [str(n.target) for n in target],
                                      autojunk=False)
    pairs = [(source[a + k], target[b + k]) for a, b, size in matcher.get_matching_blocks() for k in range(size)]
    for found, node in pairs:
        backward = found.meta.get("partitioner_tag") == "is_backward"
        stack = _user_stack(found.meta.get("nn_module_stack"))
        if backward:
            stack = forward_stacks.get(found.meta.get("seq_nr")) or stack
        if stack:
            node.meta["nn_module_stack"] = stack
        if backward:
            node.meta["custom"] = {**(node.meta.get("custom") or {}), "aotc_phase": "backward"}
    for node in program.graph.nodes:  # a getitem belongs where the op whose result it takes apart does
        if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
            for key in ("nn_module_stack", "custom"):
                if key in node.args[0].meta:
                    node.meta[key] = node.args[0].meta[key]


def _aligned(node: torch.fx.Node) -> bool:
    """Ops both graphs have one for one: not the getitems and size arithmetic export adds."""
    return node.op == "call_function" and node.target is not operator.getitem and not str(node.target).startswith(
        ("aten.sym_", "<"))


def _user_stack(stack: dict | None) -> dict:
    """A captured op's module stack below aotc's Program wrapper, with paths as the user's
    model names them ('model.fc1' -> 'fc1'); the model itself (path '') is left out."""
    out = {}
    for key, (path, type_name) in (stack or {}).items():
        if path == "model" or not path.startswith("model."):
            continue
        out[key] = (path.removeprefix("model."), type_name)
    return out


# ------------------------------------------------- captured graphs as flat programs


@dataclass
class CapturedGraph:
    """One flat graph: its ExportedProgram, signature, and real example inputs."""

    kind: str
    program: ExportedProgram
    signature: GraphSignature
    example_inputs: list[torch.Tensor]
    size_outputs: frozenset[int] = frozenset()  # outputs that are (n, 0) size carriers
    constants: dict[str, torch.Tensor] = field(default_factory=dict)  # by slot target, stored with the weights
    module_stacks: dict[int, dict] = field(default_factory=dict)  # forward ops' module stacks, by seq_nr


def kept_outputs(gm, names: Names, loss: bool) -> tuple[list[int], list[Slot]]:
    """Positions of the graph's outputs that it computes (not None, not a constant the
    model returns: the metadata records those), and their slots. A graph that computes
    none returns an empty tensor with the slot "unused", since torch.export.save cannot
    write a program without outputs."""
    descs = output_descs(gm)
    keep = [i for i, n in enumerate(output_nodes(gm)) if isinstance(n, torch.fx.Node)]
    if not keep:  # the model returns constants only: FlatCall returns one empty tensor, unused
        return keep, [Slot("unused", "unused")]
    return graph_fixes.tied_gradients_summed(gm, keep, [output_slot(descs[i], names, loss) for i in keep])


def finish_graph(kind, gm, in_slots, names: Names, real_inputs, fake_inputs, tangents) -> CapturedGraph:
    """Re-export `gm` as a flat program that drops its None outputs."""
    keep, out_slots = kept_outputs(gm, names, loss=kind == "joint")
    nodes = output_nodes(gm)
    sizes = frozenset(
        j for j, i in enumerate(keep)
        if out_slots[j].role == "saved" and isinstance(nodes[i].meta.get("val"), (int, torch.SymInt))
    )
    scalars = {
        j: SCALAR_DTYPES[scalar_type(nodes[i].meta.get("val"))] for j, i in enumerate(keep)
        if out_slots[j].role == "user_output" and scalar_type(nodes[i].meta.get("val")) is not None
    }
    flat, constants = lift_constants(gm)
    const_slots = constant_slots(kind, constants)
    program = reexport(
        FlatCall(flat, keep, tangents, size_outputs=sizes, num_constants=len(constants), scalar_outputs=scalars),
        [*real_inputs, *(v for _, v in constants)], [*fake_inputs, *(v for _, v in constants)], kind,
    )
    stacks = module_stacks(gm)
    carry_module_stacks(gm, program, stacks)
    graph_fixes.eager_group_norm(program)
    graph_fixes.reshapes_for_views(program)  # after the module stacks, which align ops by target
    backward = backward_signature(out_slots) if kind in ("joint", "backward") else None
    return CapturedGraph(
        kind=kind,
        program=program,
        signature=GraphSignature(kind=kind, inputs=[*in_slots, *const_slots], outputs=out_slots, backward=backward),
        example_inputs=[*real_inputs, *(v for _, v in constants)],
        size_outputs=sizes,
        constants={s.target: v for s, (_, v) in zip(const_slots, constants)},
        module_stacks=stacks,
    )


def constant_slots(kind: str, constants: list[tuple[str, torch.Tensor]]) -> list[Slot]:
    """Slots of a graph's lifted constants; the target is their key in weights.safetensors."""
    return [Slot(f"constant:{kind}/{name}", "constant", f"constant:{kind}/{name}", None) for name, _ in constants]


def backward_signature(out_slots: list[Slot]) -> BackwardSignature:
    return BackwardSignature(
        gradients_to_parameters={
            s.name: s.target for s in out_slots if s.role == "gradient" and s.index is None
        },
        gradients_to_user_inputs={
            s.name: s.target for s in out_slots if s.role == "gradient" and s.index is not None
        },
        loss_output=next((s.name for s in out_slots if s.role == "loss"), None),
    )


def run_user_outputs(graph: CapturedGraph) -> list[Any]:
    with torch.no_grad():
        values = list(graph.program.module()(*graph.example_inputs))
    return user_outputs(graph, values)


def user_outputs(graph: CapturedGraph, values: list[Any]) -> list[Any]:
    by_index = {
        s.index: v for s, v in zip(graph.signature.outputs, values) if s.role in ("user_output", "loss")
    }
    return [by_index.get(i) for i in range(len(by_index))]


def capture_backward(bw, forward: CapturedGraph, fw_values: list[Any], names: Names) -> CapturedGraph:
    fw_out_slots = forward.signature.outputs
    saved = [v for s, v in zip(fw_out_slots, fw_values) if s.role == "saved"]
    placeholders = graph_placeholders(bw)
    # AOTAutograd's backward takes the saved sizes first, then the saved tensors; the
    # forward returned the sizes as (n, 0) carriers (see FlatCall).
    num_sizes = sum(1 for p in placeholders if isinstance(p.meta.get("val"), (int, torch.SymInt)))
    size_saved = {fw_out_slots[j].index for j in forward.size_outputs}
    saved_order = sorted(range(len(saved)), key=lambda i: i not in size_saved)
    if len(size_saved) != num_sizes:
        raise CaptureError("the backward graph takes a different number of saved sizes than the forward saves")
    slots, reals = [], []
    for position, p in enumerate(placeholders):
        desc = p.meta.get("desc")
        if isinstance(desc, tc.TangentAOTInput):
            name, role, target, index = input_name(desc, names)
            of = next(v for s, v in zip(fw_out_slots, fw_values) if s.name == target)
            slots.append(Slot(name, role, target, index))
            # contiguous, as the runtime passes incoming gradients (compiled code assumes it)
            reals.append(torch.ones(of.shape, dtype=of.dtype, device=of.device))
        else:
            if position >= len(saved_order):
                raise CaptureError("the backward graph takes more saved values than the forward saves")
            i = saved_order[position]
            slots.append(Slot(f"saved[{i}]", "saved", None, i))
            reals.append(saved[i].detach())
    graph_fixes.tangents_as_traced(bw, [p for p in placeholders if isinstance(p.meta.get("desc"), tc.TangentAOTInput)])
    keep, out_slots = kept_outputs(bw, names, loss=False)
    size_inputs = frozenset(range(num_sizes))
    vals = [p.meta.get("val") for p in placeholders]
    flat, constants = lift_constants(bw)
    const_slots = constant_slots("backward", constants)
    consts = [v for _, v in constants]
    program = reexport(
        FlatCall(flat, keep, size_inputs=size_inputs, num_constants=len(consts)),
        [*reals, *consts], [*vals, *consts], "backward", size_inputs,
    )
    carry_module_stacks(bw, program, forward.module_stacks)
    graph_fixes.eager_group_norm(program)
    graph_fixes.reshapes_for_views(program)  # after the module stacks, which align ops by target
    return CapturedGraph(
        kind="backward",
        program=program,
        signature=GraphSignature(
            kind="backward", inputs=[*slots, *const_slots], outputs=out_slots, backward=backward_signature(out_slots)
        ),
        example_inputs=[*reals, *consts],
        constants={s.target: v for s, v in zip(const_slots, consts)},
    )
