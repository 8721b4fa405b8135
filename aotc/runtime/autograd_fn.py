"""Wrapper layer 4: a forward + backward bundle as a torch.autograd.Function.

The forward graph returns (mutated inputs, user outputs, intermediate bases, saved
activations); the Function saves the activations and returns the outputs that take a
gradient. Its backward feeds the saved values and incoming gradients to the backward
graph and routes each gradient to the parameter or input it belongs to. Outputs without
a gradient are handed to the epilogue detached.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from aotc.bundle.schema import GraphSignature, ProgramMeta
from aotc.errors import BundleError, GraphRunError, ModeError

Graph = Callable[..., tuple]


@dataclass
class TrainingGraphs:
    """Both graphs, and how their inputs and outputs line up."""

    forward: Graph
    backward: Graph
    num_visible: int  # forward outputs before the saved activations
    tangent_outputs: list[int]  # forward output positions that take a gradient, in backward order
    backward_inputs: list[tuple[str, int]]  # ("saved", i) or ("tangent", k) per backward input
    grad_targets: list[int]  # per backward output: the forward input it is the gradient of
    # forward inputs the epilogue mutates in place: an activation saved from one of them
    # must be a copy, or the mutation would invalidate it for backward
    mutated_primals: frozenset[int] = frozenset()
    # per backward output: the tangents (by position) whose gradient reaches it in eager;
    # with none of them given a gradient, eager's .grad stays None (None: always computed)
    reached_from: list[frozenset[int] | None] | None = None
    # forward output position -> (primal, offset, size, stride): outputs of custom
    # autograd.Functions that view that input in eager, returned as such views
    input_views: dict[int, tuple] | None = None
    # compiled for shape profiles (exporters/aoti_profiles.py): the forward picks a profile by
    # the inputs' sizes, and the backward runs that profile's package
    profiled: bool = False

    @classmethod
    def build(cls, forward: Graph, backward: Graph, fw: GraphSignature, bw: GraphSignature,
              mutated_primals: frozenset[int] = frozenset(), meta: ProgramMeta | None = None) -> "TrainingGraphs":
        fw_out = [s.name for s in fw.outputs]
        num_visible = sum(1 for s in fw.outputs if s.role != "saved")
        tangent_outputs = []
        backward_inputs = []
        for slot in bw.inputs:
            if slot.role == "constant":
                continue  # passed by the graph wrapper (runtime.loaded_program.with_constants)
            if slot.role == "saved":
                backward_inputs.append(("saved", slot.index))
            else:
                backward_inputs.append(("tangent", len(tangent_outputs)))
                tangent_outputs.append(fw_out.index(slot.target))
        primal_names = [s.name for s in fw.inputs]
        grad_targets = [primal_names.index(s.name.removeprefix("grad:")) for s in bw.outputs]
        reached = bw.backward.reached_from if bw.backward is not None else None
        reached_from = None
        if reached is not None:
            tangent = {s.name: k for k, s in enumerate(s for s in bw.inputs if s.role == "tangent")}
            reached_from = [
                frozenset(tangent[t] for t in reached[s.name]) if s.name in reached else None for s in bw.outputs
            ]
        user = {s.index: i for i, s in enumerate(fw.outputs) if s.role == "user_output"}
        input_views = {
            user[o.index]: (o.base_idx, o.view_offset, tuple(o.tensor.shape), tuple(o.tensor.stride))
            for o in (meta.outputs if meta is not None else [])
            if o.output_type == "custom_function_view" and o.base_idx is not None
        }
        profiled = hasattr(forward, "at")
        if profiled and getattr(backward, "labels", None) != forward.labels:
            raise BundleError(f"the forward graph is compiled for shape profiles {forward.labels} and the backward "
                              f"for {getattr(backward, 'labels', [])}: each profile needs both. Compile the bundle "
                              "again with its profiles (aotc compile BUNDLE --profile ...).")
        return cls(forward, backward, num_visible, tangent_outputs, backward_inputs, grad_targets, mutated_primals,
                   reached_from, input_views or None, profiled)


class GraphFunction(torch.autograd.Function):
    """apply(graphs, stash, *primals) -> the forward outputs that take a gradient.

    `stash` (a list) receives every visible forward output, detached, for the epilogue.
    """

    @staticmethod
    def forward(ctx, graphs: TrainingGraphs, stash: list, *primals):
        ctx.profile = graphs.forward.label(primals) if graphs.profiled else None
        outs = (graphs.forward.at(ctx.profile) if graphs.profiled else graphs.forward)(*primals)
        visible, saved = outs[: graphs.num_visible], outs[graphs.num_visible :]
        if graphs.input_views:
            # as eager's Function did: a view of the input, whose grad_fn is this Function's
            visible = list(visible)
            for position, (primal, offset, size, stride) in graphs.input_views.items():
                base = primals[primal]
                visible[position] = base.detach().as_strided(size, stride, base.storage_offset() + offset)
        tensors = [i for i, v in enumerate(saved) if isinstance(v, torch.Tensor)]
        if graphs.mutated_primals:
            # a tensor in a mutated primal's storage has its data pointer inside that storage
            spans = []
            for i in graphs.mutated_primals:
                storage = primals[i].untyped_storage()
                spans.append((storage.data_ptr(), storage.data_ptr() + storage.nbytes()))
            saved = list(saved)
            for i in tensors:
                p = saved[i].data_ptr()
                for a, b in spans:
                    if a <= p <= b:
                        saved[i] = saved[i].clone()
                        break
        ctx.save_for_backward(*[saved[i] for i in tensors])
        others = {i: v for i, v in enumerate(saved) if not isinstance(v, torch.Tensor)}
        ctx.saved_layout = (len(saved), tensors, others)
        ctx.graphs = graphs
        ctx.set_materialize_grads(False)  # an output given no gradient arrives as None (see backward)
        ctx.tangent_meta = [(visible[p].shape, visible[p].dtype, visible[p].device) for p in graphs.tangent_outputs]
        ctx.num_primals = len(primals)
        returned = tuple(visible[p] for p in graphs.tangent_outputs)
        # autograd gives the returned tensors a grad_fn in place: the caller replaces them
        # in `stash`, but a returned tensor at another position too must stay plain there
        ids = {id(v) for v in returned}
        stash.extend(v.detach() if id(v) in ids else v for v in visible)
        return returned

    @staticmethod
    def backward(ctx, *grads):
        graphs: TrainingGraphs = ctx.graphs
        count, tensor_positions, others = ctx.saved_layout
        saved = [None] * count
        for i, t in zip(tensor_positions, ctx.saved_tensors):
            saved[i] = t
        for i, v in others.items():
            saved[i] = v
        args = []
        for kind, i in graphs.backward_inputs:
            if kind == "saved":
                args.append(saved[i])
            else:
                g = grads[i]
                if g is None:
                    shape, dtype, device = ctx.tangent_meta[i]
                    g = torch.zeros(shape, dtype=dtype, device=device)
                args.append(g.contiguous())
        try:
            outs = (graphs.backward.at(ctx.profile) if graphs.profiled else graphs.backward)(*args)
        except Exception as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise GraphRunError(f"the backward graph failed at run time: {type(e).__name__}: {first}") from e
        result: list = [None] * ctx.num_primals
        given = {k for k, g in enumerate(grads) if g is not None}
        reached = graphs.reached_from or [None] * len(outs)
        for target, g, sources in zip(graphs.grad_targets, outs, reached):
            result[target] = g if sources is None or sources & given else None
        return (None, None, *result)


class _NoBackward(torch.autograd.Function):
    """Gives outputs of an inference graph a grad_fn, as eager's had, whose backward
    refuses: the bundle holds no backward graph to differentiate them with."""

    @staticmethod
    def forward(ctx, message: str, anchor: torch.Tensor, *outputs):
        ctx.message = message
        return tuple(o.detach() for o in outputs)

    @staticmethod
    def backward(ctx, *grads):

        raise ModeError(ctx.message)


def with_refusing_history(results: list, positions: list[int] | None, anchor: torch.Tensor, bundle: str) -> list:
    """`results` with the outputs at `positions` (None: every float output) requiring grad
    through _NoBackward, where eager's would have had history."""
    if positions is None:
        positions = [i for i, r in enumerate(results) if isinstance(r, torch.Tensor) and r.is_floating_point()]
    positions = [i for i in positions if isinstance(results[i], torch.Tensor) and not results[i].requires_grad]
    if not positions:
        return results
    message = (
        f"'{bundle}' holds an inference graph and no backward graph, so its outputs cannot be "
        "differentiated (eager's could: the parameters require grad and grad mode was on). Export "
        "forward+backward graphs (aotc export --autograd) and load with mode='train' to train through "
        "it; for serving, call it under torch.no_grad() or torch.inference_mode()."
    )
    unique = list({id(results[i]): results[i] for i in positions}.values())  # the same tensor twice stays one
    with torch.enable_grad():  # forward may have switched grad off on its way out, after eager's outputs had history
        wrapped = dict(zip(map(id, unique), _NoBackward.apply(message, anchor, *unique)))
    return [wrapped.get(id(r), r) if i in positions else r for i, r in enumerate(results)]
