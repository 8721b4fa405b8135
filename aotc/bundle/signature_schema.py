"""signature.json: every graph's calling convention, and the pytree specs of forward's
inputs and outputs. Part of the bundle's schema (aotc.bundle.schema imports every name
here); read and written with its helpers.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Literal

from aotc.bundle.schema_json import OMIT_DEFAULT

# "prefill" and "decode": the two inference graphs of a generation bundle (aotc.generate)
GraphKind = Literal["inference", "joint", "forward", "backward", "prefill", "decode"]
GRAPH_KINDS: tuple[str, ...] = typing.get_args(GraphKind)

# "constant": a tensor made inside forward, lifted to a graph input and stored with the weights
# "optimizer_state", "hyperparameter", "updated_parameter": a joint graph that carries its
# optimizer (aotc.optimizers) takes the optimizer's state and hyperparameters and returns
# the new parameters and state
InputRole = Literal[
    "parameter", "buffer", "user_input", "synthetic_base", "saved", "tangent", "constant", "optimizer_state",
    "hyperparameter",
]
# "unused": the empty tensor a graph returns when it computes nothing the caller sees
# (torch.export.save cannot write a program without outputs)
OutputRole = Literal[
    "input_mutation", "user_output", "intermediate_base", "saved", "gradient", "loss", "updated_parameter",
    "optimizer_state", "unused",
]
SlotRole = Literal[
    "parameter", "buffer", "user_input", "synthetic_base", "saved", "tangent", "constant",
    "input_mutation", "user_output", "intermediate_base", "gradient", "loss", "optimizer_state", "hyperparameter",
    "updated_parameter", "unused",
]

@dataclass(frozen=True)
class Slot:
    """One input or output of a graph, in graph order, and what it means.

    `target` names what the slot is about: a parameter/buffer FQN, a user input's name,
    or for gradients, tangents and mutations the FQN or input it belongs to. `index` is
    the user input/output or saved-activation index where the role has one.
    """

    name: str
    role: SlotRole
    target: str | None = None
    index: int | None = None


@dataclass(frozen=True)
class BackwardSignature:
    """Which graph output is the gradient of which parameter or user input.

    `reached_from` (forward+backward bundles): per gradient output, the tangent inputs
    whose gradient reaches it in eager's autograd graph; when none of them gets a
    gradient, eager leaves that `.grad` None, and so does the runtime.
    """

    gradients_to_parameters: dict[str, str]
    gradients_to_user_inputs: dict[str, str]
    loss_output: str | None = None
    reached_from: dict[str, list[str]] | None = None


@dataclass(frozen=True)
class GraphSignature:
    """The calling convention of one graph: its flat inputs and outputs, in order."""

    kind: GraphKind
    inputs: list[Slot]
    outputs: list[Slot]
    backward: BackwardSignature | None = None


@dataclass(frozen=True)
class UserInput:
    """One flat tensor input of the graphs: `name` is forward's parameter name plus
    pytree path. `kind` "int": an int the user declared dynamic, which the graphs take as
    an empty `(n, 0)` tensor (the runtime makes it from the int; metadata's dim 0 range
    is the int's)."""

    name: str
    path: str
    kind: Literal["tensor", "int"] = field(default="tensor", metadata={OMIT_DEFAULT: True})


ConstantType = Literal["bool", "int", "float", "str", "None", "Size"]
ScalarType = Literal["bool", "int", "float"]


@dataclass(frozen=True)
class ConstantValue:
    """A value that is not a tensor, as the bundle writes it: a float that is not finite
    as its repr ("nan", "inf")."""

    type: ConstantType
    value: bool | int | float | str | None


@dataclass(frozen=True)
class ConstantInput:
    """An input that is not a tensor, which torch.export specialized the graphs on: each
    call must pass an equal value. `in_spec` holds it as an `aotc.Constant` node (the
    value the runtime checks); here it is named for people. A float that is not finite
    is written as its repr ("nan", "inf"), a torch.Size as its list of sizes."""

    name: str
    path: str
    type: ConstantType
    value: bool | int | float | str | list[int] | None


@dataclass(frozen=True)
class Signature:
    """signature.json: the pytree specs of forward's inputs/outputs and every graph.

    `in_spec`'s leaves are the graphs' tensor inputs (`user_inputs`); inputs that are not
    tensors are nodes in it (see aotc.contract.call_inputs), the constants among them
    listed in `constant_inputs`. `state_aliases` maps a second name of a tied
    parameter/buffer to the name it is stored under; `non_persistent_buffers` are buffers
    left out of `state_dict()`.
    """

    in_spec: str
    out_spec: str
    user_inputs: list[UserInput]
    num_user_outputs: int
    graphs: dict[str, GraphSignature]
    state_aliases: dict[str, str] = field(default_factory=dict)
    non_persistent_buffers: list[str] = field(default_factory=list)
    constant_inputs: list[ConstantInput] = field(default_factory=list, metadata={OMIT_DEFAULT: True})
