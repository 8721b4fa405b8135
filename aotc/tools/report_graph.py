"""The graph view of `aotc report`: each graph of a bundle as nodes (inputs, ops,
outputs) and edges, with the user's module each op ran in (its `nn_module_stack`) and
marks for mutated inputs, aliased outputs, saved activations, backward ops, gradients
and the loss. Read from the bundle as data (`Bundle.load_program`); nothing runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aotc.bundle.files import Bundle

# inputs whose slot targets a parameter or buffer are drawn inside that module's box
_STATE_ROLES = {"parameter", "buffer"}
GRADIENT_SUM = "aten.add.Tensor"  # how autograd adds up the gradients of a value used more than once


@dataclass
class GraphNode:
    """One value of a graph as drawn: an input, an op, or one graph output."""

    name: str
    kind: str  # "input" | "op" | "output"
    label: str
    module: str = ""  # dotted path of the innermost user module ('' = the model itself)
    module_type: str = ""
    shape: str = ""
    dtype: str = ""
    role: str = ""  # the signature slot's role, for inputs and outputs
    slot: str = ""  # the signature slot's name
    marks: list[str] = field(default_factory=list)  # mutated, alias, saved, backward, gradient, loss
    note: str = ""  # what a mark means here, e.g. "alias_of_input of x"


@dataclass
class GraphView:
    kind: str
    nodes: list[GraphNode]
    edges: list[tuple[int, int]]
    modules: dict[str, str]  # module path -> class name, for every group drawn


def graph_views(bundle: Bundle) -> list[GraphView]:
    """Every graph of the bundle; the backward graph's saved activations sit in the module
    boxes of the forward ops that saved them."""
    views, saved_in = [], {}
    for kind in bundle.graph_kinds:
        views.append(graph_view(bundle, kind, saved_in))
        saved_in = {n.slot: n.module for n in views[-1].nodes if n.kind == "output" and n.role == "saved"} or saved_in
    return views


def graph_view(bundle: Bundle, kind: str, saved_in: dict[str, str] | None = None) -> GraphView:
    """The nodes and edges of one graph, with what aotc knows about each. Inputs and
    outputs that belong to a module sit in its box, so that folding a block folds them too:
    a parameter and its gradient in the parameter's module, a saved activation in the
    module of the op that made it (`saved_in`: a backward graph's, by slot name)."""
    graph = bundle.load_program(kind).graph
    signature = bundle.signature.graphs[kind]
    meta = bundle.metadata.programs.get(kind)
    in_meta = _input_meta(signature, meta)
    out_meta = {o.index: o for o in meta.outputs} if meta else {}
    nodes: list[GraphNode] = []
    index: dict[Any, int] = {}  # fx node -> position in nodes
    modules: dict[str, str] = {}
    ops = [n for n in graph.nodes if n.op == "call_function"]
    for node, slot in zip([n for n in graph.nodes if n.op == "placeholder"], signature.inputs):
        index[node] = len(nodes)
        nodes.append(_input_node(node, slot, in_meta.get(slot.name)))
        if slot.role == "saved" and saved_in:
            nodes[-1].module = saved_in.get(slot.name, "")
    for node in ops:
        index[node] = len(nodes)
        nodes.append(_op_node(node, kind, modules))
    edges = [(index[src], index[node]) for node in ops for src in node.all_input_nodes if src in index]
    values = graph.output_node().args[0]
    for value, slot in zip(values if isinstance(values, (list, tuple)) else [values], signature.outputs):
        nodes.append(_output_node(value, slot, out_meta))
        if value in index:
            edges.append((index[value], len(nodes) - 1))
            if slot.role == "saved":
                nodes[-1].module = nodes[index[value]].module
        if slot.role == "gradient" and slot.target and "." in slot.target:
            nodes[-1].module = slot.target.rpartition(".")[0]
    _place_autograd_ops(nodes, edges)
    return GraphView(kind, nodes, edges, _with_enclosing(modules, nodes))


# slot role -> (mark, note; {target} is the slot's target)
_INPUT_MARKS = {
    "saved": ("saved", "saved activation, from the forward graph"),
    "tangent": ("backward", "incoming gradient of {target}"),
}
_OUTPUT_MARKS = {
    "saved": ("saved", "saved for the backward graph"),
    "input_mutation": ("mutated", "new value of {target}, copied into it after the call"),
    "gradient": ("gradient", "gradient of {target}"),
    "loss": ("loss", "the loss"),
}


def _mark_role(view: GraphNode, slot, marks: dict[str, tuple[str, str]]) -> None:
    if slot.role in marks:
        mark, note = marks[slot.role]
        view.marks.append(mark)
        view.note = note.format(target=slot.target)


def _input_node(node, slot, info) -> GraphNode:
    view = GraphNode(node.name, "input", slot.name, role=slot.role, slot=slot.name, **_value(node))
    if slot.role in _STATE_ROLES and slot.target and "." in slot.target:
        view.module = slot.target.rpartition(".")[0]  # a parameter sits in its module's box
    if info is not None and info.mutation_type != "NOT_MUTATED":
        what = "+".join(w for w, f in (("data", info.mutates_data), ("metadata", info.mutates_metadata)) if f)
        view.marks.append("mutated")
        view.note = f"mutated ({what}, {info.mutation_type})"
    _mark_role(view, slot, _INPUT_MARKS)
    return view


def _op_node(node, kind: str, modules: dict[str, str]) -> GraphNode:
    """An op, in the box of the innermost user module it was called in (nn_module_stack,
    carried through re-export by aotc.capture.flat_programs); `modules` collects the boxes."""
    stack = list((node.meta.get("nn_module_stack") or {}).values())
    path, type_name = stack[-1] if stack else ("", "")
    for p, t in stack:
        modules.setdefault(p, t.rpartition(".")[2])
    view = GraphNode(node.name, "op", _op_label(node.target), module=path, module_type=type_name.rpartition(".")[2],
                     note=str(node.target), **_value(node))
    if kind == "backward" or (node.meta.get("custom") or {}).get("aotc_phase") == "backward":
        view.marks.append("backward")
    return view


def _place_autograd_ops(nodes: list[GraphNode], edges: list[tuple[int, int]]) -> None:
    """Ops that autograd adds to a backward graph (a gradient summed over a value's uses, a
    view of a gradient) carry the module stack of whatever op was traced before them (a
    BERT's classifier) or none, so a folded layer would lose them and every layer would
    hang off one box. A run of gradient sums (autograd's own op) with one recorded module
    is misplaced when no value around it lies in that module and the module lies outside
    the one holding them all; then a run of backward ops recorded in no module, when every
    value around it lies in one (the model's own code, such as a loss, keeps its ops).
    Each op of a misplaced run goes to the innermost module holding the placed values it
    reads (the gradients it sums come from there), else its other placed neighbours."""
    near: dict[int, list[int]] = {}
    reads: dict[int, list[int]] = {}
    for a, b in edges:
        near.setdefault(a, []).append(b)
        near.setdefault(b, []).append(a)
        reads.setdefault(b, []).append(a)
    backward = [i for i, n in enumerate(nodes) if n.kind == "op" and "backward" in n.marks]

    def misplaced_runs(recorded: bool) -> set[int]:
        found, seen = set(), set()
        for start in backward:
            own = nodes[start].module
            if start in seen or bool(own) != recorded:
                continue
            run, todo = {start}, [start]  # backward ops of one recorded module, joined by edges
            while todo:
                for j in near.get(todo.pop(), []):
                    if j not in run and nodes[j].module == own and "backward" in nodes[j].marks:
                        run.add(j)
                        todo.append(j)
            seen |= run
            around = [nodes[j].module for i in run for j in near.get(i, []) if j not in run]
            if own:  # misplaced: sums only, nothing around them in their module, which lies outside theirs
                if any(nodes[i].note != GRADIENT_SUM for i in run):
                    continue
                named = [m for m in around if m]
                common = _common_module(named) if named else ""
                if not common or _inside(own, common) or any(_inside(m, own) for m in named):
                    continue
            elif not around or _common_module(around) == "":  # the model's own code: a loss, say
                continue
            found |= run
        return found

    def place(unplaced: set[int]) -> None:
        while unplaced:
            placed = {}
            for i in unplaced:
                for side in (reads.get(i, []), near[i]):
                    around = [nodes[j].module for j in side if j not in unplaced and nodes[j].module]
                    if around:
                        placed[i] = _common_module(around)
                        break
            if not placed:
                return  # the rest touch only each other: they keep what torch recorded
            for i, module in placed.items():
                nodes[i].module, nodes[i].module_type = module, ""
            unplaced -= placed.keys()

    place(misplaced_runs(recorded=True))
    place(misplaced_runs(recorded=False))  # what is around them is placed now


def _inside(module: str, outer: str) -> bool:
    """Whether `module` is `outer` or one of its submodules ('' = the model: all are)."""
    return not outer or module == outer or module.startswith(outer + ".")


def _common_module(paths: list[str]) -> str:
    """The innermost module enclosing every one of `paths` ('' = the model)."""
    common = paths[0].split(".")
    for path in paths[1:]:
        parts = path.split(".")
        n = 0
        while n < min(len(common), len(parts)) and common[n] == parts[n]:
            n += 1
        common = common[:n]
    return ".".join(common)


def _output_node(value, slot, out_meta: dict) -> GraphNode:
    view = GraphNode(f"out:{slot.name}", "output", slot.name, role=slot.role, slot=slot.name)
    if hasattr(value, "meta"):
        facts = _value(value)
        view.shape, view.dtype = facts["shape"], facts["dtype"]
    _mark_role(view, slot, _OUTPUT_MARKS)
    if slot.role in ("user_output", "loss") and slot.index in out_meta:
        o = out_meta[slot.index]
        if o.output_type != "non_alias":
            view.marks.append("alias")
            view.note = o.output_type + (f" of {o.base}" if o.base else "")
    return view


def _with_enclosing(modules: dict[str, str], nodes: list[GraphNode]) -> dict[str, str]:
    """Every module box to draw, sorted, with its class name where an op's stack named it:
    each module a node sits in, and every box enclosing one (an empty box is never drawn:
    the layout engine cannot place one)."""
    drawn = {}
    for view in nodes:
        parts = view.module.split(".") if view.module else []
        for i in range(1, len(parts) + 1):
            path = ".".join(parts[:i])
            drawn[path] = modules.get(path, "")
    return dict(sorted(drawn.items()))


def _input_meta(signature, meta) -> dict:
    """Per input slot name, its InputMeta (constants have none)."""
    if meta is None:
        return {}
    slots = [s for s in signature.inputs if s.role != "constant"]
    return {s.name: info for s, info in zip(slots, meta.inputs)}


def _value(node) -> dict[str, str]:
    val = node.meta.get("val")
    if isinstance(val, (list, tuple)):
        return {"shape": f"{len(val)} values", "dtype": ""}
    shape = getattr(val, "shape", None)
    if shape is None:
        return {"shape": "" if val is None else type(val).__name__, "dtype": ""}
    return {"shape": "[" + ", ".join(str(s) for s in shape) + "]", "dtype": str(val.dtype).removeprefix("torch.")}


def _op_label(target) -> str:
    """'aten.addmm.default' -> 'addmm'; getitem and other Python callables by name."""
    name = getattr(target, "__name__", str(target))
    parts = str(target).split(".")
    return parts[1] if len(parts) == 3 and parts[0] in ("aten", "prims", "quantized") else name.split(".")[0]
