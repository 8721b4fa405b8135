"""Captured and re-exported graphs made fit for torch's own save, load and eager kernels.

torch.export traces a captured graph into a program that its serializer, its loader or
an eager kernel then refuses, each for a reason of its own. Each function here mends one,
changing only metadata or the form of an op (a view as a reshape, a tangent laid out as
traced), never what the graph computes; `tied_gradients_summed` returns a tied
parameter's gradient as eager's .grad holds it, one sum where the graph gave its parts.
"""

from __future__ import annotations

import operator

import torch
from torch.export import ExportedProgram

from aotc import _torch_compat as tc
from aotc._torch_compat import pytree


def savable(program: ExportedProgram) -> None:
    """What torch.export.save and torch.export.load need of `program`, done in place."""
    _hop_outputs_as_tuples(program.graph_module)
    _savable_sym_ops(program.graph_module)
    _complete_ranges(program)


def _hop_outputs_as_tuples(gm: torch.fx.GraphModule) -> None:
    """A control-flow op (cond, while_loop) traced by AOTAutograd records its outputs as a
    list, which torch.export's serializer takes for one output it cannot write; it writes
    a tuple. Only the metadata changes."""
    for module in gm.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            if tc.is_higher_order_op(node.target) and isinstance(node.meta.get("val"), list):
                node.meta["val"] = tuple(node.meta["val"])


def _savable_sym_ops(gm: torch.fx.GraphModule) -> None:
    """Size arithmetic torch.export.save cannot write, as arithmetic it can:
    `torch.sym_sum(xs)` as a chain of `+`, and `round(x)` (half to even) with floor
    division, comparisons and `sym_ite`. What the graph computes does not change."""
    for module in gm.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        graph = module.graph
        for node in list(graph.nodes):
            if node.target is torch.sym_sum:
                made = _sym_sum(graph, node, node.args[0])
            elif node.target is round and (len(node.args) == 1 or node.args[1] is None) and not node.kwargs:
                made = _round_half_even(graph, node, node.args[0])
            else:
                continue
            node.replace_all_uses_with(made)
            graph.erase_node(node)
        module.recompile()


def _op(graph: torch.fx.Graph, fn, *args):
    """A node of `fn(*args)` whose "val" is fn applied to the arguments' values."""
    made = graph.call_function(fn, args)
    made.meta["val"] = fn(*(a.meta["val"] if isinstance(a, torch.fx.Node) else a for a in args))
    return made


def _sym_sum(graph, node, values):
    with graph.inserting_before(node):
        total = values[0]
        for value in values[1:]:
            total = _op(graph, operator.add, total, value)
    return total if isinstance(total, torch.fx.Node) else _op(graph, operator.add, total, 0)


def _round_half_even(graph, node, x):
    with graph.inserting_before(node):
        floor = _op(graph, operator.floordiv, x, 1)
        frac = _op(graph, operator.sub, x, floor)
        up = _op(graph, operator.add, floor, 1)
        even = _op(graph, operator.eq, _op(graph, operator.mod, floor, 2), 0)
        tie = _op(graph, torch.sym_ite, even, floor, up)
        nearest = _op(graph, torch.sym_ite, _op(graph, operator.lt, frac, 0.5), floor, tie)
        return _op(graph, torch.sym_int, _op(graph, torch.sym_ite, _op(graph, operator.gt, frac, 0.5), up, nearest))


def _complete_ranges(program: ExportedProgram) -> None:
    """Every size symbol in the graph's tensor metadata with a range, as torch.export.load
    needs: a symbol that survives only in a stride (a saved activation's, in backward)
    is missing from range_constraints, and loading the program asks for its range."""
    known = program.range_constraints
    for node in program.graph.nodes:
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        for size in (*val.shape, *val.stride()):
            if not isinstance(size, torch.SymInt):
                continue
            shape_env = size.node.shape_env
            for sym in size.node.expr.free_symbols:
                if sym not in known and sym in shape_env.var_to_range:
                    known[sym] = shape_env.var_to_range[sym]


def tied_gradients_summed(gm: torch.fx.GraphModule, keep: list[int], slots: list) -> tuple[list[int], list]:
    """A tied parameter that the graph takes twice (BLOOM's embedding and LM head, where
    torch.export's module holds them as one parameter under two names) can get a gradient
    per use; it gets their sum, as eager's .grad does, under its one name. `keep`: the
    output positions the flat program returns, `slots` theirs (aotc.bundle.schema.Slot)."""
    first: dict[str, int] = {}
    dropped: set[int] = set()
    node = next(n for n in gm.graph.nodes if n.op == "output")
    flat, spec = pytree.tree_flatten(node.args[0], is_leaf=lambda x: x is None)
    for j, (i, slot) in enumerate(zip(keep, slots)):
        if slot.role != "gradient":
            continue
        if slot.name not in first:
            first[slot.name] = i
            continue
        k = first[slot.name]
        with gm.graph.inserting_before(node):
            total = gm.graph.call_function(torch.ops.aten.add.Tensor, (flat[k], flat[i]))
        total.meta = {"val": flat[k].meta.get("val")}
        flat[k] = total
        dropped.add(j)
    if not dropped:
        return keep, slots
    node.args = (pytree.tree_unflatten(flat, spec),)
    gm.recompile()
    return [i for j, i in enumerate(keep) if j not in dropped], [s for j, s in enumerate(slots) if j not in dropped]


def tangents_as_traced(gm: torch.fx.GraphModule, tangents: list[torch.fx.Node]) -> None:
    """The runtime passes incoming gradients contiguous; AOTAutograd traced the backward with
    each tangent laid out as its forward output (channels-last, or a transpose's strides:
    diffusers' HunyuanImage, Sana, UNet3D), and views it on that layout. Each such tangent
    is laid out so first, in the graph: permuted, copied contiguous, permuted back."""
    for node in tangents:
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.dim() < 2:
            continue
        if any(isinstance(s, torch.SymInt) for s in (*val.shape, *val.stride())):
            continue  # a dynamic size (int() would specialize it): the backward keeps the tangent as given
        strides, sizes = list(val.stride()), list(val.shape)
        if val.is_contiguous() or 0 in strides or 0 in sizes:
            continue
        order = sorted(range(val.dim()), key=lambda d: (-strides[d], -d))
        back = sorted(range(val.dim()), key=order.__getitem__)
        graph = gm.graph
        with graph.inserting_after(node):
            outer = graph.call_function(torch.ops.aten.permute.default, (node, order))
        with graph.inserting_after(outer):
            dense = graph.call_function(torch.ops.aten.clone.default, (outer,), {"memory_format": torch.contiguous_format})
        with graph.inserting_after(dense):
            laid = graph.call_function(torch.ops.aten.permute.default, (dense, back))
        for made, value in ((outer, val.permute(order)), (dense, val.permute(order).contiguous()), (laid, val)):
            made.meta = {"val": value}
        node.replace_all_uses_with(laid, delete_user_cb=lambda user: user is not outer)
    gm.recompile()


def views_as_reshapes(gm: torch.fx.GraphModule) -> bool:
    """A captured graph's views of non-contiguous tensors as reshapes; whether there were any.

    torch.export's trace gives some ops another layout than eager and AOTAutograd do (a
    convolution of a channels-last-3d input comes out contiguous: diffusers' Mochi VAE), so
    a view AOTAutograd traced on the real layout is refused when the captured graph is
    exported again. A reshape is that view wherever the layout allows it (at run time, the
    real layout always does), and a copy where export's layout does not."""
    changed = False
    for node in gm.graph.nodes:
        val = node.args[0].meta.get("val") if node.target is torch.ops.aten.view.default else None
        if isinstance(val, torch.Tensor) and not val.is_contiguous():
            node.target = torch.ops.aten.reshape.default
            changed = True
    gm.recompile()
    return changed


def reshapes_for_views(program: ExportedProgram) -> None:
    """A flat program's views as reshapes, which are the same view wherever the layout
    allows one. Its layouts are the fake kernels' and some eager kernels lay out their
    result otherwise: softplus_backward follows its non-contiguous gradient where the fake
    one says contiguous (Doge's backward), and a view the fake layout allowed fails on the
    real one. A reshape then copies, and computes the same values."""
    gm = program.graph_module
    for node in gm.graph.nodes:
        if node.target is torch.ops.aten.view.default:
            node.target = torch.ops.aten.reshape.default
    gm.recompile()


def eager_group_norm(program: ExportedProgram) -> None:
    """Eager's group_norm makes its input contiguous in the memory format the real input
    suggests before the CPU kernel, which asserts it. Traced on fake tensors, that step
    vanishes where the fake input looked contiguous, but a real one with a size-1 dim (a
    batch of 1) can have other strides (diffusers' VAE attention block gives (32, 1, 512,
    32) where the fake had (8192, 1, 512, 32)), and the kernel refuses it. Where only the
    normalized output is used (inference), the graph calls eager's group_norm itself.

    (From torch 2.14 the fake kernel also says contiguous where the CPU kernel keeps a
    channels-last input's layout. The graph keeps eager's layout, which a dropout after it
    draws its mask in, and reshapes_for_views makes the views after it hold: timm's cpubone.)"""
    gm = program.graph_module
    for node in list(gm.graph.nodes):
        if node.target is not torch.ops.aten.native_group_norm.default:
            continue
        x, weight, bias, n, c, hw, groups, eps = node.args
        val = x.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.device.type != "cpu":
            continue
        users = list(node.users)
        if not all(u.target is operator.getitem and (u.args[1] == 0 or not u.users) for u in users):
            continue  # mean and rstd are saved for backward: only native_group_norm gives them
        outputs = [u for u in users if u.args[1] == 0]
        with gm.graph.inserting_before(node):
            made = gm.graph.call_function(torch.ops.aten.group_norm.default, (x, groups, weight, bias, eps, False))
        made.meta = {**node.meta, "val": outputs[0].meta.get("val")} if outputs else dict(node.meta)
        for u in users:
            u.replace_all_uses_with(made)
            gm.graph.erase_node(u)
        gm.graph.erase_node(node)
    gm.recompile()
