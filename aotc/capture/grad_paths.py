"""Which inputs each output's gradient reaches in eager, read off eager's autograd graph.

A forward+backward bundle runs as one autograd.Function, whose backward computes every
input's gradient at once. Eager's autograd leaves `.grad` None for a leaf that no output
the caller differentiates reaches, so the runtime must know, per output, which inputs
its gradient reaches: the eager call at capture (eager_check) walks its autograd graph
from each output and each input it mutated visibly, and the driver writes the result
into the backward graph's signature (`BackwardSignature.reached_from`).

The walk also names the custom autograd.Functions eager ran: torch.export inlines their
forward and differentiates that, dropping the Function's own backward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from aotc import _torch_compat as tc
from aotc.bundle.schema import GraphSignature, ProgramMeta, Slot

# A root is ("output", flat output index) or ("input", flat user input index) for an input
# the call mutated visibly to autograd; a target is ("input", index), ("base", index) for
# the autograd base of a view input, or ("param", name).
Key = tuple[str, object]


@dataclass(frozen=True)
class GradPaths:
    reach: dict[Key, frozenset[Key]]  # root -> the targets its gradient reaches
    custom_functions: tuple[str, ...]  # names of the custom autograd.Functions on the way
    params: tuple[str, ...] = ()  # the parameters' names as the walked module had them
    tracked: frozenset[Key] = frozenset()  # the inputs the walk can tell apart (see target_nodes)


def target_nodes(inputs: list, params: dict[str, torch.Tensor]) -> tuple[dict[int, set[Key]], dict[object, set[Key]]]:
    """Before the call: leaves by id (their AccumulateGrad's variable) and the grad_fn of
    each non-leaf input that requires grad, each with its target keys.

    A non-leaf input that is a view, or shares memory with another input, is not a target
    itself: an in-place op on one view makes autograd rebuild the grad_fn of every view of
    that base, so its node from before the call need not be on any path afterwards. Its
    autograd base is, as ("base", i): capture traces such inputs on that base (a synthetic
    base), and an in-place op on a view keeps the base's old node under the new one."""
    leaves: dict[int, set[Key]] = {}
    nodes: dict[object, set[Key]] = {}
    storages = [t.untyped_storage().data_ptr() if isinstance(t, torch.Tensor) else None for t in inputs]
    for i, t in enumerate(inputs):
        if not isinstance(t, torch.Tensor) or not t.requires_grad:
            continue
        if t.grad_fn is None:
            leaves.setdefault(id(t), set()).add(("input", i))
        elif t._base is None and storages.count(storages[i]) == 1:
            nodes.setdefault(t.grad_fn, set()).add(("input", i))
        if t._base is not None:
            base = t._base
            table, key = (leaves, id(base)) if base.grad_fn is None else (nodes, base.grad_fn)
            table.setdefault(key, set()).add(("base", i))
    for name, p in params.items():
        if p.requires_grad:
            leaves.setdefault(id(p), set()).add(("param", name))
    return leaves, nodes


def walk(roots: dict[Key, torch.Tensor], leaves: dict[int, set[Key]], nodes: dict[object, set[Key]],
         params: tuple[str, ...]) -> GradPaths:
    """Follow each root's grad_fn through `next_functions` (iteratively: real models are
    thousands of nodes deep), collecting the targets reached."""
    memo: dict[object, frozenset[Key]] = {}
    custom: set[str] = set()

    def reach_of(start) -> frozenset[Key]:
        stack = [(start, False)]
        while stack:
            node, expanded = stack.pop()
            if node in memo:
                continue
            children = [n for n, _ in node.next_functions if n is not None]
            if not expanded:
                stack.append((node, True))
                stack.extend((c, False) for c in children if c not in memo)
                continue
            found: set[Key] = set(nodes.get(node, ()))
            variable = getattr(node, "variable", None)  # AccumulateGrad
            if variable is not None:
                found |= leaves.get(id(variable), set())
            if tc.is_custom_function_node(node):
                custom.add(type(node).__name__.removesuffix("Backward"))
            for c in children:
                found |= memo[c]
            memo[node] = frozenset(found)
        return memo[start]

    reach = {}
    for key, t in roots.items():
        if t.grad_fn is not None:
            reach[key] = reach_of(t.grad_fn)
        elif t.requires_grad and id(t) in leaves:  # the output is a leaf input or parameter
            reach[key] = frozenset(leaves[id(t)])
    tracked = frozenset(k for keys in [*leaves.values(), *nodes.values()] for k in keys if k[0] != "param")
    return GradPaths(reach, tuple(sorted(custom)), params, tracked)


def reached_from(paths: GradPaths, forward: GraphSignature, backward: GraphSignature, meta: ProgramMeta,
                 user_names: list[str], state_name) -> dict[str, list[str]]:
    """Per gradient output of `backward`: the tangent inputs whose gradient reaches it in
    eager. A tangent whose roots cannot be told (an output the walk did not see) counts as
    reaching every gradient, so the runtime never turns a real gradient into None."""
    by_name = {s.name: s for s in forward.outputs}
    bases = {}  # intermediate base index -> the user outputs that view it
    for out in meta.outputs:
        if out.output_type.startswith("alias_of_intermediate") and out.base_idx is not None:
            bases.setdefault(out.base_idx, []).append(out.index)
    base_slots = [s for s in forward.outputs if s.role == "intermediate_base"]

    def roots_of(tangent: Slot) -> set[Key] | None:
        slot = by_name.get(tangent.target)
        if slot is None:
            return None
        if slot.role in ("user_output", "loss"):
            return {("output", slot.index)}
        if slot.name.startswith("mutated:") and not slot.name.startswith("mutated:base_of:") and slot.index is not None:
            return {("input", slot.index)}
        if slot.role == "intermediate_base":
            position = base_slots.index(slot)
            views = bases.get(position)
            return {("output", k) for k in views} if views else None
        return None

    def targets_of(gradient: Slot) -> set[Key] | None:
        if gradient.name.startswith("grad:base_of:"):  # a synthetic base: the members' autograd base
            return {("base", gradient.index)} if ("base", gradient.index) in paths.tracked else None
        if gradient.target in user_names:
            found = {("input", i) for i, n in enumerate(user_names) if n == gradient.target}
            return found if found <= paths.tracked else None
        return {("param", raw) for raw in paths.params if state_name(raw) == gradient.target} or None

    tangents = [s for s in backward.inputs if s.role == "tangent"]
    result = {}
    for gradient in backward.outputs:
        targets = targets_of(gradient)
        if targets is None:
            continue
        reaching = []
        for tangent in tangents:
            roots = roots_of(tangent)
            if roots is None or any(root not in paths.reach or paths.reach[root] & targets for root in roots):
                reaching.append(tangent.name)
        result[gradient.name] = reaching
    return result
