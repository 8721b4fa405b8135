"""`LoadedModule.train_step`: one call of a joint bundle's graph, a whole training step.

The graph returns the loss, every gradient and the new buffers (and, for a bundle that
carries its optimizer, the new parameters and optimizer state). The step applies them as
eager's `loss.backward()` (and `opt.step(); opt.zero_grad()`) would leave them: .grad
accumulated where eager's would be, a gradient that aliases an input or another one
copied, buffers updated in place by the epilogue.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from aotc.errors import AotcError, GraphRunError, ModeError
from aotc.runtime.distributed import check_joint_step
from aotc.runtime.grads import accumulate, spans
from aotc.runtime.loaded_program import Program

if TYPE_CHECKING:
    from aotc.runtime.module import LoadedModule


def joint_step(module: LoadedModule, args: tuple, kwargs: dict) -> torch.Tensor:
    """`module.train_step(*args, **kwargs)`: see LoadedModule.train_step."""
    check_joint_step(module)  # refused under DDP/FSDP2, which would never see these gradients
    if "joint" not in module._programs:
        raise ModeError(
            f"train_step needs a joint bundle; this one has {', '.join(module._graph_kinds)}. "
            "Export a joint bundle (graphs=(\"joint\",); aotc export --joint), or call the module and .backward() "
            "for a forward+backward bundle."
        )
    program = module._programs["joint"]
    if module._ambient.active:
        module._ambient.check()
    flat = module._flatten(args, kwargs)
    if program.guard.active:
        program.guard.check(flat)
    primals = program.primals(flat)
    fused = module._fused
    extra = fused.inputs(primals) if fused is not None else []
    try:
        with torch.no_grad():
            outs = list(program.graph(*primals, *extra))
            if fused is not None:  # the new parameters and state: the graph's last outputs
                fused.apply(outs[len(outs) - fused.num_outputs:])
        program.epilogue.apply(primals, outs, flat)
    except AotcError:
        raise
    except Exception as e:
        raise GraphRunError(module._failure("joint", e, flat)) from e
    loss = None
    layer = module._subclasses
    inner_grads = {}
    taken: set[int] = set()  # data pointers already given to a .grad in this step
    plan = _plan(module, program)
    # a graph may return an input (or a view of one) as a gradient
    inputs = spans(primals) if any(kind == "grad" for kind, *_ in plan) else []
    with torch.no_grad():
        for kind, position, target, always in plan:
            value = outs[position]
            if kind == "loss":
                loss = value
            elif kind == "inner":
                inner_grads[target] = value  # a subclass parameter's: set below, as the subclass
            else:
                tensor = primals[target]
                if tensor.requires_grad or always:
                    ptr = value.data_ptr()
                    shared = (ptr in taken or not value.is_contiguous() or value.numel() == 0
                              or any(a <= ptr < b for a, b in inputs))
                    accumulate(tensor, value, shared)
                    taken.add(ptr)
        for fqn, grad in (layer.outer_grads(inner_grads) if layer is not None else {}).items():
            accumulate(module.get_parameter(fqn), grad, True)
    return loss


def _plan(module: LoadedModule, program: Program) -> list[tuple[str, int, object, bool]]:
    """Per joint-graph output that matters: ("loss" | "grad" | "inner", output
    position, the primal index (or inner tensor name) it is the gradient of, whether
    to set it even when that tensor does not require grad). Built on first use."""
    plan = getattr(program, "joint_plan", None)
    if plan is None:
        names = [s.name for s in program.signature.inputs]
        owner = module._subclasses.owner if module._subclasses is not None else {}
        plan = []
        for position, slot in enumerate(program.signature.outputs):
            if slot.role == "loss":
                plan.append(("loss", position, None, False))
            elif slot.role == "gradient":
                name = slot.name.removeprefix("grad:")
                if module._fused is not None and program.signature.inputs[names.index(name)].role == "parameter":
                    continue  # the optimizer took it; eager's zero_grad() leaves no .grad
                if name in owner:
                    plan.append(("inner", position, name, False))
                else:
                    plan.append(("grad", position, names.index(name), slot.index is None))
        program.joint_plan = plan
    return plan
