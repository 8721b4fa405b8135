"""What capture takes (CaptureOptions, MODES) and what it gives back (Capture)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from aotc._torch_compat import pytree
from aotc.bundle.schema import ConstantInput, OptimizerInfo, ProgramMeta, TensorMeta, UserInput
from aotc.bundle.subclasses_schema import Subclasses
from aotc.capture.flat_programs import CapturedGraph

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
    # one line per declared dim torch.export proved a narrower range for (capture.ranges)
    narrowed: list[str] = field(default_factory=list)
    # where the eager model had tensor subclasses (None: it had none)
    subclasses: Subclasses | None = None
    # the optimizer a joint graph carries, and its state by '<fqn>/<key>' (aotc.contract.optimizers)
    optimizer: OptimizerInfo | None = None
    optimizer_state: dict[str, torch.Tensor] = field(default_factory=dict)
    # the inputs that are not tensors, which the graphs are specialized on (see
    # aotc.contract.call_inputs; `in_spec` holds them as nodes)
    constant_inputs: list[ConstantInput] = field(default_factory=list)
