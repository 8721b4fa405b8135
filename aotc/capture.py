"""Capture: a model and example inputs -> flat, functional graphs plus full metadata.

The capture policy, in three steps, all on PyTorch's own machinery:

1. `torch.export.export(strict=False)` of the model (and loss, for training graphs)
   with the user's dynamic shapes. This handles data-dependent Python (Hugging Face
   masks) and gives symbolic example inputs.
2. AOTAutograd (`aot_export_joint_with_descriptors`) on that program: functionalizes it,
   records every input mutation and output alias (ViewAndMutationMeta), and for training
   traces the joint graph; `aot_compile_joint_with_descriptors` with the chosen
   partitioner splits it into forward and backward.
3. Each resulting graph is exported again, as a flat program
   `(params, buffers, user inputs | saved, tangents) -> outputs`, so it can be saved with
   `torch.export.save` and compiled by AOTInductor. Weights are inputs, never constants.

Mutations and aliasing are *not* replayed by these graphs: mutated inputs come out as
extra outputs and aliased outputs as plain tensors. The metadata says how the runtime
puts them back, exactly as AOTAutograd's own runtime wrappers do.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.export import ExportedProgram

from aotc import _torch_compat as tc
from aotc import eager_check
from aotc._torch_compat import pytree
from aotc.aliasing import clone_like, exact_copy, storage_groups, synthetic_base
from aotc.errors import CaptureError
from aotc.dynamic_shapes import declared_ranges, user_dynamic_shapes
from aotc.flat_graph import CapturedGraph, capture_backward, finish_graph, run_user_outputs, user_outputs
from aotc.graph_meta import (
    alias_groups,
    build_program_meta,
    check_scalar_loss,
    eager_views,
    graph_placeholders,
    members,
    tensor_meta,
    traced_min,
)
from aotc.model_file import forward_arg_names
from aotc.outputs import plain_outputs
from aotc.slots import Names, input_name, state_aliases
from aotc.schema import (
    ProgramMeta,
    Slot,
    TensorMeta,
    UserInput,
)

# Which graphs each capture mode produces.
MODES: dict[str, tuple[str, ...]] = {
    "inference": ("inference",),
    "joint": ("joint",),
    "autograd": ("forward", "backward"),
}


@dataclass(frozen=True)
class CaptureOptions:
    """What to capture. `mode` is a key of MODES; `train` puts the model in train mode
    for an inference capture (training captures always use train mode)."""

    mode: str = "inference"
    partitioner: str = "min-cut"
    train: bool = False
    dynamic_shapes: Any = None
    # what an inference graph is called in the bundle ("prefill" and "decode" for generation)
    graph_name: str = "inference"


@dataclass
class Capture:
    """Everything capture learned about a model, ready for the bundle writer."""

    graphs: dict[str, CapturedGraph]
    programs: dict[str, ProgramMeta]
    user_inputs: list[UserInput]
    user_input_meta: list[TensorMeta]
    in_spec: pytree.TreeSpec
    out_spec: pytree.TreeSpec
    num_user_outputs: int
    state: dict[str, torch.Tensor]
    training: bool
    partitioner: str | None
    state_aliases: dict[str, str] = field(default_factory=dict)
    non_persistent_buffers: list[str] = field(default_factory=list)
    # symbol -> the smallest size the trace assumed, where the user declared a smaller one;
    # the exporter runs the sizes in between against eager before it accepts them
    small_sizes: dict[str, int] = field(default_factory=dict)


class Program(torch.nn.Module):
    """The model, optionally followed by its loss: the thing torch.export traces.

    With `keywords`, the last len(keywords) positional arguments are passed to the model
    as those keywords: torch.export is then called with positional inputs only, since it
    mis-matches dynamic_shapes with keyword inputs of a forward that takes **kwargs.
    """

    def __init__(self, model: torch.nn.Module, loss=None, keywords: tuple[str, ...] = ()):
        super().__init__()
        self.model = model
        self.loss = loss
        self.keywords = keywords

    def forward(self, *args, **kwargs):
        if self.keywords:
            split = len(args) - len(self.keywords)
            args, kwargs = args[:split], dict(zip(self.keywords, args[split:]), **kwargs)
        out = self.model(*args, **kwargs)
        if self.loss is None:
            return plain_outputs(out)
        return self.loss(out, *args, **kwargs)


# ------------------------------------------------------------------ inputs and shapes


def _check_plain_tensors(module: torch.nn.Module, flat: list[Any], names: list[str]) -> None:
    for name, value in zip(names, flat):
        if not isinstance(value, torch.Tensor):
            raise CaptureError(
                f"Input '{name}' is a {type(value).__name__}; aotc bundles take tensors only. "
                "Make it a tensor, or bake the constant into the model."
            )
        if type(value) not in (torch.Tensor, torch.nn.Parameter):
            raise CaptureError(
                f"Input '{name}' is a {type(value).__name__}: tensor subclasses (DTensor, "
                "nested tensors, ...) are not supported in aotc v1. Pass a plain tensor."
            )
    for fqn, t in [*module.named_parameters(), *module.named_buffers()]:
        if type(t) not in (torch.Tensor, torch.nn.Parameter):
            raise CaptureError(
                f"'{fqn}' is a {type(t).__name__}: tensor subclasses are not supported in aotc v1."
            )


def _value_range(t: torch.Tensor) -> list[int] | None:
    if t.dtype.is_floating_point or t.dtype.is_complex or t.numel() == 0:
        return None
    return [int(t.min()), int(t.max())]


# ---------------------------------------------------------------------------- capture


def _flat_user_names(model, args: tuple, kwargs: dict) -> tuple[list[str], list[str]]:
    """Readable name and pytree path of every flat user input."""
    arg_names = forward_arg_names(model, args, kwargs)
    leaves, _ = pytree.tree_flatten_with_path((args, kwargs))
    names, paths = [], []
    for path, _ in leaves:
        head, rest = path[0], path[1:]
        if head.idx == 0:
            base = arg_names[rest[0].idx]
            rest = rest[1:]
        else:
            base = rest[0].key
            rest = rest[1:]
        suffix = pytree.keystr(rest) if rest else ""
        names.append(base + suffix)
        paths.append(pytree.keystr(path))
    return names, paths


def _export_program(program: Program, args, kwargs, dynamic_shapes) -> ExportedProgram:
    """torch.export of `program`, with keyword inputs passed positionally (see Program);
    the result's module takes `(*args, *kwargs.values())`."""
    spec = user_dynamic_shapes(program.model, args, kwargs, dynamic_shapes)
    flat_spec = None if spec is None else {"args": (*spec["args"], *spec["kwargs"].values())}
    positional = Program(program.model, program.loss, keywords=tuple(kwargs))
    return torch.export.export(
        positional, (*args, *kwargs.values()), dynamic_shapes=flat_spec, strict=False
    )


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


def capture(model: torch.nn.Module, args: tuple, kwargs: dict, loss=None, options: CaptureOptions = CaptureOptions()) -> Capture:
    """Capture `model(*args, **kwargs)` as the graphs of `options.mode`.

    Neither the model's weights and buffers nor the example inputs are changed.
    """
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

    user_names, user_paths = _flat_user_names(model, args, kwargs)
    flat_user, in_spec = pytree.tree_flatten((args, kwargs))
    _check_plain_tensors(model, flat_user, user_names)
    duplicates: dict[int, int] = {}  # later position -> first position of the same tensor
    for j, t in enumerate(flat_user):
        first = next((i for i in range(j) if flat_user[i] is t), None)
        if first is not None:
            duplicates[j] = first

    was_training = model.training
    model.train(training)
    try:
        program = Program(model, loss if options.mode == "joint" else None)
        eager = eager_check.observe(program, flat_user, in_spec, training=options.mode != "inference")
        context = (model, args, kwargs, loss, options, training, user_names, user_paths, flat_user, in_spec, duplicates, eager)
        try:
            return _capture(*context, use_export=True)
        except _Disagreement:
            # torch.export sometimes traces an op that returns its input as a copy
            # (dropout in eval); AOTAutograd alone keeps the alias.
            pass
        try:
            return _capture(*context, use_export=False)
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


def _capture(model, args, kwargs, loss, options, training, user_names, user_paths, flat_user, in_spec, duplicates,
             eager: eager_check.EagerCall, use_export: bool) -> Capture:
    # Clone so that tracing never touches the caller's tensors; duplicates stay duplicates.
    clones = dict(enumerate(clone_like(flat_user)))
    for i in eager.requires_grad_set:
        # forward calls requires_grad_() on this input: trace it as requiring grad from
        # the start; the runtime switches the caller's tensor on before the graph runs
        if clones[i].is_leaf:
            clones[i].requires_grad_(True)
    c_args, c_kwargs = pytree.tree_unflatten([clones[i] for i in range(len(flat_user))], in_spec)

    names = Names(user_names, state_aliases(model))
    program = Program(model, loss if options.mode == "joint" else None)
    aliased = storage_groups(flat_user)
    if aliased and options.dynamic_shapes is not None:
        raise CaptureError(
            f"inputs {', '.join(user_names[i] for i in aliased[0])} share memory; aotc captures such "
            "inputs with static shapes only. Drop dynamic_shapes, or pass separate tensors."
        )
    try:
        # torch.export makes each input a tensor of its own; AOTAutograd keeps their aliasing
        ep = None if aliased or not use_export else _export_program(program, c_args, c_kwargs, options.dynamic_shapes)
    except CaptureError:
        raise
    except Exception as e:
        if options.dynamic_shapes is not None:
            raise CaptureError(
                f"torch.export could not trace {type(model).__name__}: {type(e).__name__}: "
                f"{_first_line(e)} Pass --debug for torch's full message."
            ) from e
        # Some programs torch.export cannot trace (e.g. a metadata mutation that changes an
        # input's rank) AOTAutograd captures directly; without dynamic dims nothing is lost.
        ep = None
    if ep is not None:
        custom = [s.target for s in ep.graph_signature.input_specs if s.kind.name == "CUSTOM_OBJ"]
        if custom:
            raise CaptureError(
                f"{type(model).__name__} holds script objects ({', '.join(custom)}); a bundle holds "
                "tensors only, and would have to pickle them to keep them. Keep their state in tensors."
            )
        gm = ep.module()
        grad_mode_after = eager_check.grad_mode_leak(ep, program, c_args, c_kwargs)
        # Symbolic stand-ins for the user inputs, from torch.export; duplicates share one.
        user_specs = [s for s in ep.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
        fake_user = [ep.graph.find_nodes(op="placeholder", target=s.arg.name)[0].meta["val"] for s in user_specs]
        for j, i in duplicates.items():
            fake_user[j] = fake_user[i]
        for f, t in zip(fake_user, clones.values()):
            if isinstance(f, torch.Tensor) and t.requires_grad and not f.requires_grad:
                f.requires_grad_(True)
    else:
        gm = program
        grad_mode_after = None
        fake_user = [clones[i] for i in range(len(flat_user))]
    f_args, f_kwargs = pytree.tree_unflatten(fake_user, in_spec)
    if ep is not None:  # its module takes keyword inputs positionally (see _export_program)
        f_args, f_kwargs = (*f_args, *f_kwargs.values()), {}

    state = {
        names.state(k): v.detach()
        for k, v in [*gm.named_parameters(remove_duplicate=False), *gm.named_buffers(remove_duplicate=False)]
    }
    if aliased:
        on_storage = {i for group in aliased for i in group}
        names = dataclasses.replace(names, metadata_mutated=tuple(i for i in eager.metadata_mutated if i in on_storage))
    jgm, fw_metadata, out_spec, partitioned = _aot_capture(model, gm, f_args, f_kwargs, options)

    # Everything below runs on real tensors, outside AOTAutograd's fake mode.
    primal_nodes = [p for p in graph_placeholders(jgm) if not isinstance(p.meta.get("desc"), tc.TangentAOTInput)]
    primal_slots = [Slot(*input_name(p.meta["desc"], names)) for p in primal_nodes]
    real_primals = [_real_input(slot, state, flat_user) for slot in primal_slots]
    fake_primals = [p.meta["val"] for p in primal_nodes]
    graphs: dict[str, CapturedGraph] = {}
    if options.mode == "inference":
        name = options.graph_name
        graphs[name] = finish_graph(name, jgm, primal_slots, names, real_primals, fake_primals, tangents=None)
        user_out_values = run_user_outputs(graphs[name])
    elif options.mode == "joint":
        tangent_nodes = [p for p in graph_placeholders(jgm) if isinstance(p.meta.get("desc"), tc.TangentAOTInput)]
        if any(not isinstance(n.meta["desc"].output, tc.PlainAOTOutput) for n in tangent_nodes):
            raise CaptureError(
                f"{type(model).__name__} mutates an input that requires grad; a joint graph supports "
                "the loss as its only differentiable output. Export with --autograd instead."
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

    program_meta = build_program_meta(
        jgm, fw_metadata, primal_slots, real_primals, fake_primals, user_out_values, duplicates,
        eager_views=eager_views(eager, primal_slots, aliased),
    )
    if aliased:
        base_inputs = {s.index for s in primal_slots if s.role == "synthetic_base"}
        program_meta = dataclasses.replace(
            program_meta,
            aliased_inputs=alias_groups(flat_user, primal_slots),
            outputs_same_as_inputs={
                str(k): v for k, v in eager.same_as_inputs.items() if base_inputs and v in members(aliased)
            },
        )
    program_meta = dataclasses.replace(program_meta, inputs_set_requires_grad=list(eager.requires_grad_set))
    program_meta = eager_check.eager_output_requires_grad(program_meta, eager, user_names)
    problems = eager_check.disagreements(
        program_meta, eager, user_names, duplicates, differentiable=options.mode != "inference"
    )
    if problems:
        raise _Disagreement(problems)
    if program_meta.grad_enabled_mutation is None and grad_mode_after is not None:
        program_meta = dataclasses.replace(program_meta, grad_enabled_mutation=grad_mode_after)

    # The ranges the user declared (torch.export reports them; its trace assumed sizes >= 2)
    declared = declared_ranges(ep) if ep is not None else {}
    user_input_meta = [
        dataclasses.replace(tensor_meta(t, f, declared), value_range=_value_range(t))
        for t, f in zip(flat_user, fake_user)
    ]
    traced = {k: v for f in fake_user for k, v in traced_min(f).items()}
    small_sizes = {s: traced[s] for s, (lo, _) in declared.items() if s in traced and lo < traced[s]}
    meta_key = {"autograd": "forward", "inference": options.graph_name}.get(options.mode, options.mode)
    return Capture(
        graphs=graphs,
        programs={meta_key: program_meta},
        user_inputs=[UserInput(name=n, path=p) for n, p in zip(user_names, user_paths)],
        user_input_meta=user_input_meta,
        in_spec=in_spec,
        out_spec=out_spec,
        num_user_outputs=out_spec.num_leaves if options.mode != "joint" else 1,
        state=state,
        training=training,
        partitioner=options.partitioner if options.mode == "autograd" else None,
        state_aliases=names.aliases,
        small_sizes=small_sizes,
        non_persistent_buffers=[
            f"{prefix}.{name}" if prefix else name
            for prefix, module in model.named_modules()
            for name in module._non_persistent_buffers_set
        ],
    )


def _aot_capture(model, gm, f_args, f_kwargs, options: CaptureOptions):
    """AOTAutograd's graph, metadata and out spec; for "autograd", the partitioned
    (forward, backward) graphs too. AOTAutograd's fake mode is active only in here."""
    grad_ctx = torch.no_grad() if options.mode == "inference" else contextlib.nullcontext()
    with contextlib.ExitStack() as stack, grad_ctx:
        stack.enter_context(tc.eager_dropout())
        try:
            try:
                jd = tc.aot_export_joint_with_descriptors(stack, gm, f_args, f_kwargs)
            except RuntimeError as e:
                if options.mode != "inference" or "A view was created in no_grad mode" not in str(e):
                    raise
                # Tracing under no_grad with inputs that require grad trips autograd's view
                # checks on in-place ops eager allows; an inference graph needs no grad.
                f_args, f_kwargs = _detached((f_args, f_kwargs))
                jd = tc.aot_export_joint_with_descriptors(stack, gm, f_args, f_kwargs)
        except Exception as e:
            if "Encountered a set_ on a graph input" in str(e):
                raise CaptureError(
                    f"{type(model).__name__}.forward calls set_() on an input (giving it another "
                    "tensor's storage) and also changes that input otherwise. aotc's graphs are "
                    "functional, and AOTAutograd cannot return such a swap for the runtime to "
                    "replay. Copy the values instead (input.copy_(other)), or do the set_() "
                    "outside the model."
                ) from e
            raise CaptureError(
                f"{type(model).__name__} could not be captured by torch.export nor by AOTAutograd: "
                f"{type(e).__name__}: {_first_line(e)} Pass --debug for torch's full message."
            ) from e
        jgm = jd.graph_module
        if options.mode == "joint":
            check_scalar_loss(jgm)
        is_joint_graph = any(isinstance(p.meta.get("desc"), tc.TangentAOTInput) for p in graph_placeholders(jgm))
        fw_metadata = jd._aot_state.fw_metadata
        if options.mode == "inference" and is_joint_graph:
            raise CaptureError(
                f"{type(model).__name__}.forward gives an output that requires grad even under "
                "no_grad (it enables grad itself, e.g. with torch.enable_grad()); an inference graph "
                "cannot give that output a gradient. Export with --autograd, or drop the enable_grad."
            )
        if options.mode != "inference" and not any(i.requires_grad for i in fw_metadata.input_info):
            raise CaptureError(
                f"Nothing in {type(model).__name__} requires a gradient, so there is no backward "
                "to capture. Unfreeze parameters, or export an inference graph."
            )
        if options.mode == "joint" and not is_joint_graph:
            raise CaptureError(
                f"The loss of {type(model).__name__} does not depend on anything that requires a "
                "gradient, so there is no training step to capture."
            )
        partitioned = None
        if options.mode == "autograd" and is_joint_graph:
            recorded: dict[str, torch.fx.GraphModule] = {}

            def recorder(name):
                def compiler(graph_module, example_inputs):
                    recorded[name] = graph_module
                    return graph_module

                return compiler

            try:
                tc.aot_compile_joint_with_descriptors(
                    jd,
                    partition_fn=tc.PARTITIONERS[options.partitioner],
                    fw_compiler=recorder("forward"),
                    bw_compiler=recorder("backward"),
                )
            except Exception as e:
                raise CaptureError(
                    f"partitioning the joint graph of {type(model).__name__} failed: "
                    f"{type(e).__name__}: {_first_line(e)}"
                ) from e
            partitioned = (recorded["forward"], recorded["backward"])
        return jgm, fw_metadata, jd.out_spec, partitioned


def _detached(tree):
    """Every tensor of `tree` detached; the same tensor twice stays one."""
    memo: dict[int, torch.Tensor] = {}
    return pytree.tree_map_only(torch.Tensor, lambda t: memo.setdefault(id(t), t.detach()), tree)


def _real_input(slot: Slot, state: dict[str, torch.Tensor], flat_user: list[torch.Tensor]) -> torch.Tensor:
    if slot.role in ("parameter", "buffer"):
        return state[slot.target].clone()
    t = flat_user[slot.index]
    # laid out exactly as the caller's: the graph is re-exported (and compiled) for it
    return exact_copy(synthetic_base(t) if slot.role == "synthetic_base" else t.detach())


__all__ = ["MODES", "Capture", "CaptureOptions", "CapturedGraph", "capture"]
