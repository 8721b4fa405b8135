"""The capture driver: checks the user's inputs, runs torch's tracers, and assembles a Capture.

A capture is tried first through torch.export and AOTAutograd, and again with
AOTAutograd alone when the first result disagrees with what eager did (see
eager_check); a second disagreement is an error, never a bundle.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from aotc import _torch_compat as tc
from aotc._torch_compat import pytree
from aotc.bundle.schema import Slot, UserInput
from aotc.capture import eager_check, subclasses
from aotc.capture.dynamic_shapes import declared_ranges, with_narrowings
from aotc.capture.flat_programs import CapturedGraph, capture_backward, finish_graph, run_user_outputs, user_outputs
from aotc.capture.grad_paths import reached_from
from aotc.capture.inputs import BoundCall, check_tensors, duplicate_positions, flat_user_names, value_range
from aotc.capture.metadata import (
    alias_groups,
    build_program_meta,
    eager_views,
    graph_placeholders,
    members,
    tensor_meta,
    traced_min,
)
from aotc.capture.model_with_loss import Program
from aotc.capture.range_guards import describe as describe_narrowing
from aotc.capture.slot_names import Names, input_name, state_aliases
from aotc.capture.trace import aot_capture, export_program, first_line
from aotc.capture.types import MODES, Capture, CaptureOptions
from aotc.contract.aliasing import clone_like, exact_copy, storage_groups, synthetic_base
from aotc.contract.call_inputs import int_positions
from aotc.errors import CaptureError


@dataclass(frozen=True)
class CaptureContext:
    """One capture's inputs, checked and flattened once; each attempt starts from it.

    `flat_user`, `user_names` and `user_paths` are parallel, in the order of
    `pytree.tree_flatten((args, kwargs))`, whose spec is `in_spec`; `duplicates` maps a
    later position to the first position holding the same tensor object. `model` stays in
    `training` mode while the context is in use, and `eager` is what one eager call of
    the program did with these inputs.
    """

    model: torch.nn.Module
    loss: Any
    options: CaptureOptions
    training: bool
    user_names: list[str]
    user_paths: list[str]
    # names of the inputs torch.export takes (with tensor subclasses, the outer ones)
    call_names: list[str]
    flat_user: list[torch.Tensor]
    in_spec: pytree.TreeSpec
    duplicates: dict[int, int]
    eager: eager_check.EagerCall
    # where the model's tensor subclasses are; the fields above are then the dense view
    # (each subclass input as its inner tensors, see capture.subclasses)
    subclasses: subclasses.SubclassPlan | None = None
    # flat positions of ints declared dynamic (empty (n, 0) carriers, see contract.call_inputs)
    int_inputs: frozenset[int] = frozenset()

    def program(self) -> Program:
        """A fresh Program: the model, followed by the loss only for a joint graph."""
        return Program(self.model, self.loss if self.options.mode == "joint" else None)


def capture(model: torch.nn.Module, args: tuple, kwargs: dict, loss=None, options: CaptureOptions = CaptureOptions()) -> Capture:
    """Capture `model(*args, **kwargs)` as the graphs of `options.mode`; every input a
    tensor (a call with other inputs is bound first: capture_call).

    Neither the model's weights and buffers nor the example inputs are changed.
    """
    names, paths = flat_user_names(model, args, kwargs, loss if options.mode == "joint" else None)
    return _capture_named(model, args, kwargs, loss, options, names, paths)


def capture_call(model: torch.nn.Module, call: BoundCall, options: CaptureOptions = CaptureOptions()) -> Capture:
    """Capture a bound call (aotc.capture.inputs.bind_call): its inputs, names, loss,
    dynamic shapes and constants as bound."""
    options = dataclasses.replace(options, dynamic_shapes=call.dynamic_shapes)
    captured = _capture_named(model, call.args, call.kwargs, call.loss, options, call.names, call.paths)
    return dataclasses.replace(captured, constant_inputs=call.constants)


def _capture_named(model: torch.nn.Module, args: tuple, kwargs: dict, loss, options: CaptureOptions,
                   user_names: list[str], user_paths: list[str]) -> Capture:
    if options.mode not in MODES:
        raise CaptureError(f"unknown capture mode '{options.mode}'; expected one of {sorted(MODES)}")
    if options.partitioner not in tc.PARTITIONER_NAMES:
        raise CaptureError(
            f"unknown partitioner '{options.partitioner}'; expected one of {list(tc.PARTITIONER_NAMES)}"
        )
    training = options.train or options.mode != "inference"
    if options.mode != "inference" and loss is None and options.mode == "joint":
        raise CaptureError(
            "A joint graph needs a loss: define loss(outputs, *inputs) returning a scalar "
            "tensor in the model file (or pass loss= to aotc.export)."
        )

    call_names = user_names
    flat_user, in_spec = pytree.tree_flatten((args, kwargs))
    check_tensors(model, flat_user, user_names)
    plan = subclasses.plan(model, flat_user, user_names, in_spec)
    if plan is not None:
        dense = plan.dense_tree(flat_user)
        user_paths = [pytree.keystr(path) for path, _ in pytree.tree_flatten_with_path(dense)[0]]
        flat_user, in_spec = pytree.tree_flatten(dense)
        user_names = plan.dense_names()

    was_training = model.training
    model.train(training)
    try:
        program = Program(model, loss if options.mode == "joint" else None)
        observed = program if plan is None else subclasses.DenseProgram(program, plan)
        eager = eager_check.observe(observed, flat_user, in_spec, training=options.mode != "inference")
        duplicates = duplicate_positions(flat_user)
        if plan is not None:
            subclasses.refuse_unsupported(plan, options.mode, duplicates, flat_user, user_names)
        ctx = CaptureContext(
            model=model, loss=loss, options=options, training=training,
            user_names=user_names, user_paths=user_paths, call_names=call_names, flat_user=flat_user, in_spec=in_spec,
            duplicates=duplicates, eager=eager, subclasses=plan,
            int_inputs=frozenset(int_positions((args, kwargs))) if plan is None else frozenset(),
        )
        try:
            return _capture(ctx, use_export=True)
        except _Disagreement as d:
            # torch.export sometimes traces an op that returns its input as a copy
            # (dropout in eval); AOTAutograd alone keeps the alias.
            declined = d
        try:
            return _capture(ctx, use_export=False)
        except CaptureError as e:
            if type(e) is not CaptureError:
                raise
            # say why torch.export's graph was not taken: it did trace the model
            name, why = type(model).__name__, str(e)
            both = f"{name} could not be captured by torch.export nor by AOTAutograd: "
            why = f"AOTAutograd alone failed: {why[len(both):]}" if why.startswith(both) else why
            raise CaptureError(f"{name} could not be captured: torch.export traced it, but its graph cannot be "
                               f"used ({'; '.join(declined.problems)}); {why}") from e
        except _Disagreement as d:
            raise CaptureError(
                f"aotc's capture of {type(model).__name__} does not match what eager does: "
                f"{'; '.join(d.problems)}. aotc refuses to write a bundle that would replay "
                "something else; please report this model."
            ) from None
    finally:
        model.train(was_training)


class _Disagreement(Exception):
    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


def _capture(ctx: CaptureContext, use_export: bool) -> Capture:
    """One attempt: torch.export then AOTAutograd, or AOTAutograd alone (without
    `use_export`, for aliased inputs, or where torch.export cannot trace without dynamic
    dims). Raises _Disagreement when the graphs' metadata contradicts eager."""
    # Clone so that tracing never touches the caller's tensors; duplicates stay duplicates.
    clones = dict(enumerate(clone_like(ctx.flat_user)))
    for i in ctx.eager.requires_grad_set:
        # forward calls requires_grad_() on this input: trace it as requiring grad from
        # the start; the runtime switches the caller's tensor on before the graph runs
        if clones[i].is_leaf:
            clones[i].requires_grad_(True)
    plan = ctx.subclasses
    dense_clones = [clones[i] for i in range(len(ctx.flat_user))]
    if plan is None:
        c_args, c_kwargs = pytree.tree_unflatten(dense_clones, ctx.in_spec)
    else:  # torch's tracers take the subclasses themselves
        outer_clones = plan.outer_inputs(dense_clones)
        c_args, c_kwargs = pytree.tree_unflatten(outer_clones, plan.outer_in_spec)

    names = Names(ctx.user_names, state_aliases(ctx.model))
    program = ctx.program()
    aliased = storage_groups(ctx.flat_user)
    if aliased and ctx.options.dynamic_shapes is not None:
        raise CaptureError(
            f"inputs {', '.join(ctx.user_names[i] for i in aliased[0])} share memory; aotc captures such "
            "inputs with static shapes only. Drop dynamic_shapes, or pass separate tensors."
        )
    custom = ctx.eager.grad_paths.custom_functions if ctx.eager.grad_paths is not None else ()
    if use_export and custom and not aliased:
        if ctx.options.dynamic_shapes is not None:
            raise CaptureError(
                f"{type(ctx.model).__name__} calls custom autograd.Functions ({', '.join(custom)}): torch.export "
                "would trace their forward and drop their backward, and AOTAutograd alone, which keeps it, "
                "captures static shapes only. Drop dynamic_shapes, or export an inference graph."
            )
        # torch.export inlines a custom Function's forward: its own backward would be lost
        raise _Disagreement([f"custom autograd.Functions {', '.join(custom)} lose their backward in torch.export"])
    arg_names = ctx.call_names
    try:
        # torch.export makes each input a tensor of its own; AOTAutograd keeps their aliasing
        ep, narrowings, export_error = None, [], None
        if use_export and not aliased:
            ep, narrowings = export_program(program, c_args, c_kwargs, ctx.options.dynamic_shapes, arg_names)
    except CaptureError:
        raise
    except Exception as e:
        if ctx.options.dynamic_shapes is not None:
            raise CaptureError(
                f"torch.export could not trace {type(ctx.model).__name__}: {type(e).__name__}: "
                f"{first_line(e)}"
            ) from e
        # Some programs torch.export cannot trace (e.g. a metadata mutation that changes an
        # input's rank) AOTAutograd captures directly; without dynamic dims nothing is lost.
        # Where AOTAutograd fails too, torch.export's error is the one that says why.
        ep, export_error = None, e
    if ep is not None:
        custom = [s.target for s in ep.graph_signature.input_specs if s.kind.name == "CUSTOM_OBJ"]
        if custom:
            raise CaptureError(
                f"{type(ctx.model).__name__} holds script objects ({', '.join(custom)}); a bundle holds "
                "tensors only, and would have to pickle them to keep them. Keep their state in tensors."
            )
        gm = ep.module()
        grad_mode_after = eager_check.grad_mode_leak(ep, program, c_args, c_kwargs)
        # Symbolic stand-ins for the user inputs, from torch.export; duplicates share one.
        user_specs = [s for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
        fake_user = [ep.graph.find_nodes(op="placeholder", target=s.arg.name)[0].meta["val"] for s in user_specs]
        for j, i in ctx.duplicates.items():
            fake_user[j] = fake_user[i]
        for f, t in zip(fake_user, clones.values() if plan is None else outer_clones):
            if isinstance(f, torch.Tensor) and t.requires_grad and not f.requires_grad:
                f.requires_grad_(True)
    else:
        gm = program
        grad_mode_after = None
        fake_user = dense_clones if plan is None else outer_clones
    f_args, f_kwargs = pytree.tree_unflatten(fake_user, ctx.in_spec if plan is None else plan.outer_in_spec)
    if plan is not None:  # the rest of capture sees the dense view
        fake_user = plan.dense_inputs(fake_user)
    if ep is not None:  # its module takes keyword inputs positionally (see _export_program)
        f_args, f_kwargs = (*f_args, *f_kwargs.values()), {}

    state = {
        names.state(k): v.detach()
        for k, v in [*gm.named_parameters(remove_duplicate=False), *gm.named_buffers(remove_duplicate=False)]
    }
    if plan is not None:
        state = subclasses.dense_state(state)
    if aliased:
        on_storage = {i for group in aliased for i in group}
        metadata_mutated = tuple(i for i in ctx.eager.metadata_mutated if i in on_storage)
        names = dataclasses.replace(names, metadata_mutated=metadata_mutated)
    jgm, fw_metadata, out_spec, partitioned = aot_capture(ctx.model, gm, f_args, f_kwargs, ctx.options, plan, ep,
                                                          export_error)

    # Everything below runs on real tensors, outside AOTAutograd's fake mode.
    primal_nodes = [p for p in graph_placeholders(jgm) if not isinstance(p.meta.get("desc"), tc.TangentAOTInput)]
    primal_slots = [Slot(*input_name(p.meta["desc"], names)) for p in primal_nodes]
    real_primals = [_real_input(slot, state, ctx.flat_user) for slot in primal_slots]
    fake_primals = [p.meta["val"] for p in primal_nodes]
    graphs: dict[str, CapturedGraph] = {}
    if ctx.options.mode == "inference":
        name = ctx.options.graph_name
        graphs[name] = finish_graph(name, jgm, primal_slots, names, real_primals, fake_primals, tangents=None)
        user_out_values = run_user_outputs(graphs[name])
    elif ctx.options.mode == "joint":
        tangent_nodes = [p for p in graph_placeholders(jgm) if isinstance(p.meta.get("desc"), tc.TangentAOTInput)]
        if any(not isinstance(n.meta["desc"].output, tc.PlainAOTOutput) for n in tangent_nodes):
            raise CaptureError(
                f"{type(ctx.model).__name__} mutates an input that requires grad; a joint graph supports "
                "the loss as its only differentiable output. Export forward+backward graphs instead "
                "(graphs=(\"forward\", \"backward\"); aotc export --autograd)."
            )
        tangents = [n.meta["val"].dtype for n in tangent_nodes]
        graphs["joint"] = finish_graph("joint", jgm, primal_slots, names, real_primals, fake_primals, tangents=tangents)
        user_out_values = run_user_outputs(graphs["joint"])
    elif partitioned is None:
        # Every output that takes a gradient aliases an input: the runtime rebuilds those
        # as views of the caller's tensors (autograd flows through the views), so there is
        # a forward graph and no backward one.
        graphs["forward"] = finish_graph("forward", jgm, primal_slots, names, real_primals, fake_primals, tangents=None)
        user_out_values = run_user_outputs(graphs["forward"])
    else:
        fw, bw = partitioned
        graphs["forward"] = finish_graph("forward", fw, primal_slots, names, real_primals, fake_primals, tangents=None)
        fw_values = list(graphs["forward"].program.module()(*graphs["forward"].example_inputs))
        user_out_values = user_outputs(graphs["forward"], fw_values)
        graphs["backward"] = capture_backward(bw, graphs["forward"], fw_values, names)

    views = eager_views(ctx.eager, primal_slots, aliased)
    program_meta = build_program_meta(
        jgm, fw_metadata, primal_slots, real_primals, fake_primals, user_out_values, ctx.duplicates,
        eager_views=views,
    )
    program_meta = eager_check.custom_function_views(program_meta, ctx.eager, views)
    program_meta = eager_check.hidden_leaf_mutations(program_meta, ctx.eager, ctx.user_names)
    if "backward" in graphs:
        tangents = {s.target for s in graphs["backward"].signature.inputs if s.role == "tangent"}
        program_meta, problems = eager_check.differentiable_mutations(program_meta, ctx.eager, ctx.user_names, tangents)
        if problems:
            raise _Disagreement(problems)
    if aliased:
        base_inputs = {s.index for s in primal_slots if s.role == "synthetic_base"}
        program_meta = dataclasses.replace(
            program_meta,
            aliased_inputs=alias_groups(ctx.flat_user, primal_slots),
            outputs_same_as_inputs={
                str(k): v for k, v in ctx.eager.same_as_inputs.items() if base_inputs and v in members(aliased)
            },
        )
    program_meta = dataclasses.replace(program_meta, inputs_set_requires_grad=list(ctx.eager.requires_grad_set))
    program_meta = eager_check.eager_output_requires_grad(program_meta, ctx.eager, ctx.user_names)
    if ctx.options.mode == "inference" and plan is None:
        history = eager_check.outputs_with_history(ctx.program(), ctx.flat_user, ctx.in_spec)
        program_meta = dataclasses.replace(program_meta, outputs_with_history=history)
    problems = eager_check.disagreements(
        program_meta, ctx.eager, ctx.user_names, ctx.duplicates, differentiable=ctx.options.mode != "inference"
    )
    if problems:
        raise _Disagreement(problems)
    if program_meta.grad_enabled_mutation is None and grad_mode_after is not None:
        program_meta = dataclasses.replace(program_meta, grad_enabled_mutation=grad_mode_after)
    if "backward" in graphs and ctx.eager.grad_paths is not None and plan is None:
        bw = graphs["backward"]
        reached = reached_from(ctx.eager.grad_paths, graphs["forward"].signature, bw.signature, program_meta,
                               ctx.user_names, names.state)
        signature = dataclasses.replace(bw.signature, backward=dataclasses.replace(bw.signature.backward, reached_from=reached))
        graphs["backward"] = dataclasses.replace(bw, signature=signature)

    # The ranges the user declared (torch.export reports them; its trace assumed sizes >= 2)
    declared = declared_ranges(ep) if ep is not None else {}
    user_input_meta = [
        dataclasses.replace(tensor_meta(t, f, declared), value_range=value_range(t))
        for t, f in zip(ctx.flat_user, fake_user)
    ]
    if narrowings and plan is None:  # places index the inputs torch.export took: here, the flat user inputs
        user_input_meta = with_narrowings(user_input_meta, narrowings)
    traced = {k: v for f in fake_user for k, v in traced_min(f).items()}
    small_sizes = {s: traced[s] for s, (lo, _) in declared.items() if s in traced and lo < traced[s]}
    meta_key = {"autograd": "forward", "inference": ctx.options.graph_name}.get(ctx.options.mode, ctx.options.mode)
    return Capture(
        graphs=graphs,
        programs={meta_key: program_meta},
        user_inputs=[UserInput(name=n, path=p, kind="int" if i in ctx.int_inputs else "tensor")
                     for i, (n, p) in enumerate(zip(ctx.user_names, ctx.user_paths))],
        user_input_meta=user_input_meta,
        in_spec=ctx.in_spec,
        out_spec=out_spec,
        num_user_outputs=out_spec.num_leaves if ctx.options.mode != "joint" else 1,
        state=state,
        training=ctx.training,
        partitioner=ctx.options.partitioner if ctx.options.mode == "autograd" else None,
        state_aliases=names.aliases,
        small_sizes=small_sizes,
        narrowed=[describe_narrowing(n, arg_names) for n in narrowings],
        subclasses=None if plan is None else plan.schema(),
        non_persistent_buffers=[
            f"{prefix}.{name}" if prefix else name
            for prefix, module in ctx.model.named_modules()
            for name in module._non_persistent_buffers_set
            if module._buffers.get(name) is not None  # a buffer registered as None is no tensor (timm's Swin)
        ],
    )


def _real_input(slot: Slot, state: dict[str, torch.Tensor], flat_user: list[torch.Tensor]) -> torch.Tensor:
    if slot.role in ("parameter", "buffer"):
        return state[slot.target].clone()
    t = flat_user[slot.index]
    # laid out exactly as the caller's: the graph is re-exported (and compiled) for it
    return exact_copy(synthetic_base(t) if slot.role == "synthetic_base" else t.detach())
