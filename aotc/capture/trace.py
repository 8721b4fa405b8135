"""torch's two tracers, run for capture: torch.export of the Program, then AOTAutograd.

Both turn torch's failures into CaptureErrors that name the model; which tracer runs,
and what happens when one fails, is the driver's policy.
"""

from __future__ import annotations

import contextlib
import re

import torch
from torch.export import ExportedProgram

from aotc import _torch_compat as tc
from aotc._torch_compat import pytree
from aotc.capture.module_copy import attributes_restored
from aotc.capture.dynamic_shapes import user_dynamic_shapes
from aotc.capture.metadata import check_scalar_loss, graph_placeholders
from aotc.capture.model_with_loss import Program
from aotc.capture.range_guards import Narrowing
from aotc.capture.ranges import export_within_ranges
from aotc.capture.subclasses import SubclassPlan, desugar, with_outer_requires_grad
from aotc.capture.types import CaptureOptions
from aotc.errors import CaptureError


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


def export_program(program: Program, args, kwargs, dynamic_shapes, names: list[str]) -> tuple[ExportedProgram, list[Narrowing]]:
    """torch.export of `program`, with keyword inputs passed positionally (see Program);
    the result's module takes `(*args, *kwargs.values())`. Where torch.export proves a
    declared range does not hold, it is exported within the one that does (see ranges),
    and the narrowings come back with the program; `names` are the flat inputs' names."""
    spec = user_dynamic_shapes(program.model, args, kwargs, dynamic_shapes)
    positional = Program(program.model, program.loss, keywords=tuple(kwargs))
    inputs = (*args, *kwargs.values())

    def export(flat_spec):
        with tc.eager_rnn(), attributes_restored(program.model):
            return torch.export.export(positional, inputs, dynamic_shapes=flat_spec, strict=False)

    spec_args = None if spec is None else (*spec["args"], *spec["kwargs"].values())
    return export_within_ranges(export, spec_args, inputs, names, type(program.model).__name__)


def aot_capture(model, gm, f_args, f_kwargs, options: CaptureOptions, subclass_plan: SubclassPlan | None = None,
                program: ExportedProgram | None = None, export_error: Exception | None = None):
    """AOTAutograd's graph, metadata and out spec; for "autograd", the partitioned
    (forward, backward) graphs too. AOTAutograd's fake mode is active only in here;
    `program` is torch.export's, whose fake mode a program without tensor inputs needs;
    `export_error` why torch.export could not trace the model, said first if AOTAutograd fails too.

    With tensor subclasses (`subclass_plan`), AOTAutograd traces their inner tensors;
    the graphs' descriptors, the metadata and the out spec returned are of that dense view.
    """
    grad_ctx = torch.no_grad() if options.mode == "inference" else contextlib.nullcontext()
    with contextlib.ExitStack() as stack, grad_ctx:
        if program is not None and not any(isinstance(t, torch.Tensor) for t in pytree.tree_leaves((f_args, f_kwargs))):
            stack.enter_context(tc.fake_mode_tracing(program))  # no input to find torch.export's fake mode by
        stack.enter_context(tc.eager_dropout())
        stack.enter_context(tc.eager_rnn())
        stack.enter_context(tc.random_draws_kept())
        if isinstance(model, torch.nn.Module):
            stack.enter_context(attributes_restored(model))
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
                # torch 2.14 on traces a swap by `.data` assignment as its own op
                how = ("calls aten.shallow_copy_data_ (a .data assignment) on an input"
                       if program is not None and _calls(program, "shallow_copy_data_") else "calls set_() on an input")
                raise CaptureError(
                    f"{type(model).__name__}.forward {how}, giving it another tensor's storage. aotc's "
                    "graphs are functional, and AOTAutograd cannot return such a swap for the runtime to "
                    "replay. Copy the values instead (input.copy_(other)), or swap the storage outside "
                    "the model."
                ) from e
            if "expected to have an entirely functional graph" in str(e):
                op = re.search(r"target=torch\.ops\.(aten\.\w+)", str(e))
                raise CaptureError(
                    f"{type(model).__name__}.forward runs an in-place op ({op[1] if op else 'in place'}) on a tensor "
                    "that is, or is made from, a plain tensor attribute of the model (set in __init__, not a parameter "
                    "or buffer), which AOTAutograd cannot make functional (torch.export keeps it as a constant). "
                    "Register the attribute as a buffer (self.register_buffer(name, tensor, persistent=False)), or "
                    "compute out of place."
                ) from e
            tried = (f"torch.export: {type(export_error).__name__}: {first_line(export_error)}; AOTAutograd: "
                     if export_error is not None else "")
            raise CaptureError(
                f"{type(model).__name__} could not be captured by torch.export nor by AOTAutograd: "
                f"{tried}{type(e).__name__}: {first_line(e)}"
            ) from (export_error or e)
        jgm = jd.graph_module
        if subclass_plan is not None:
            subclass_plan.record_grads(tc.grad_input_metas(jd))
            desugar(jgm, subclass_plan)
        if options.mode == "joint":
            check_scalar_loss(jgm)
        is_joint_graph = any(isinstance(p.meta.get("desc"), tc.TangentAOTInput) for p in graph_placeholders(jgm))
        fw_metadata = tc.dense_fw_metadata(jd)
        if subclass_plan is not None:
            fw_metadata = with_outer_requires_grad(fw_metadata, jgm, subclass_plan)
        if options.mode == "inference" and is_joint_graph:
            raise CaptureError(
                f"{type(model).__name__}.forward gives an output that requires grad even under "
                "no_grad (it enables grad itself, e.g. with torch.enable_grad()); an inference graph "
                "cannot give that output a gradient. Export forward+backward graphs (aotc export --autograd), or drop the enable_grad."
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
                    f"{type(e).__name__}: {first_line(e)}"
                ) from e
            partitioned = (recorded["forward"], recorded["backward"])
            if subclass_plan is not None:
                for graph in partitioned:
                    desugar(graph, subclass_plan)
        out_spec = jd.out_spec if subclass_plan is None else subclass_plan.dense_out_spec
        return jgm, fw_metadata, out_spec, partitioned


def _detached(tree):
    """Every tensor of `tree` detached; the same tensor twice stays one."""
    memo: dict[int, torch.Tensor] = {}
    return pytree.tree_map_only(torch.Tensor, lambda t: memo.setdefault(id(t), t.detach()), tree)


def _calls(program: ExportedProgram, op_name: str) -> bool:
    """Whether torch.export's graph calls `aten.<op_name>` (any overload)."""
    return any(n.op == "call_function" and getattr(n.target, "__name__", "").split(".")[0] == op_name
               for n in program.graph.nodes)
