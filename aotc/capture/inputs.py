"""The user's example inputs, flattened: their names, what aotc accepts, and their aliasing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from aotc._torch_compat import pytree
from aotc.bundle.schema import ConstantInput
from aotc.capture.dynamic_shapes import ProgramShapes, user_dynamic_shapes
from aotc.capture.ranges import spec_at
from aotc.contract import call_inputs
from aotc.contract.loss_inputs import LossOverInputs, model_args, with_loss_inputs
from aotc.contract.subclasses import check_capturable, is_subclass
from aotc.errors import CaptureError
from aotc.sources.model_file import forward_arg_names, split_inputs


@dataclass(frozen=True)
class BoundCall:
    """The call export captures, bound once from what the user gave (example inputs, loss
    inputs, dynamic_shapes): capture, the writer and the checks read it. Tensors are its
    leaves, every other input a node (aotc.contract.call_inputs)."""

    args: tuple
    kwargs: dict
    # `dynamic_shapes` rewritten to match the bound tree; None if none was given
    dynamic_shapes: ProgramShapes | None
    # the inputs torch.export specializes on, named
    constants: list[ConstantInput]
    # the loss as the call runs it (loss_inputs given: a LossOverInputs); None without one
    loss: Any
    # readable name and pytree path of each flat tensor of the call, in order
    names: list[str]
    paths: list[str]


def bind_call(model, example_inputs: Any, mode: str = "inference", loss=None, loss_inputs=None,
              dynamic_shapes: Any = None) -> BoundCall:
    """`model`'s call on `example_inputs` (a tensor, a tuple of inputs, or (args, kwargs)) as
    capture takes it: `loss_inputs` appended for a joint graph's loss; an int with a Dim in
    `dynamic_shapes` becomes a symbolic size, every other input that is not a tensor a
    constant."""
    args, kwargs = split_inputs(example_inputs, "example_inputs")
    if loss_inputs is not None:
        args, loss = with_loss_inputs(mode, args, loss, loss_inputs)
    call_loss = loss if mode == "joint" else None  # only a joint graph's inputs feed a loss
    names, paths = flat_user_names(model, args, kwargs, call_loss)
    leaves = pytree.tree_leaves((args, kwargs), is_leaf=call_inputs.atomic)
    extra = call_loss.input_names() if isinstance(call_loss, LossOverInputs) else []
    spec = user_dynamic_shapes(model, args, kwargs, dynamic_shapes, extra)
    spec_args = None if spec is None else (*spec["args"], *spec["kwargs"].values())
    flat_inputs = pytree.tree_flatten_with_path((*args, *kwargs.values()), is_leaf=call_inputs.atomic)[0]
    dynamic_ints = {
        i for i, (path, value) in enumerate(flat_inputs)
        if spec_args is not None and call_inputs.is_dynamic_int(value, spec_at(spec_args, path, (*args, *kwargs.values())))
    }
    b_args, b_kwargs = call_inputs.bind(args, kwargs, names, dynamic_ints)
    constants, kept = [], []
    for i, (n, p, v) in enumerate(zip(names, paths, leaves)):
        if isinstance(v, torch.Tensor) or i in dynamic_ints:
            kept.append(i)
        else:
            kind, value = call_inputs.constant_context(v)
            constants.append(ConstantInput(name=n, path=p, type=kind, value=value))
    shapes = None
    if spec is not None:
        bound = call_inputs.adapt_dynamic_shapes((tuple(spec["args"]), spec["kwargs"]), (b_args, b_kwargs))
        shapes = ProgramShapes(*bound)
    return BoundCall(b_args, b_kwargs, shapes, constants, loss, [names[i] for i in kept], [paths[i] for i in kept])


def flat_user_names(model, args: tuple, kwargs: dict, loss=None) -> tuple[list[str], list[str]]:
    """Readable name and pytree path of every flat user input (the inputs a `loss` reads
    of its own, aotc.contract.loss_inputs, named as the loss names them)."""
    arg_names = forward_arg_names(model, model_args(loss, args), kwargs)
    if isinstance(loss, LossOverInputs):
        arg_names += loss.input_names()
    leaves, _ = pytree.tree_flatten_with_path((args, kwargs), is_leaf=call_inputs.atomic)
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


def check_tensors(module: torch.nn.Module, flat: list[Any], names: list[str]) -> None:
    """Inputs are tensors once bound (bind_call); subclasses (inputs, parameters, buffers)
    ones aotc can store."""
    for name, value in zip(names, flat):
        if not isinstance(value, torch.Tensor):  # capture() called without bind_call
            raise CaptureError(
                f"Input '{name}' is a {type(value).__name__}; capture() takes tensors, with other inputs bound "
                "first (aotc.capture.inputs.bind_call, as aotc.export does)."
            )
        if is_subclass(value):
            check_capturable(value, name)
    for fqn, t in [*module.named_parameters(), *module.named_buffers()]:
        if is_subclass(t):
            check_capturable(t, fqn)


def duplicate_positions(flat_user: list[Any]) -> dict[int, int]:
    """Later position -> first position of the same tensor object."""
    duplicates: dict[int, int] = {}
    for j, t in enumerate(flat_user):
        first = next((i for i in range(j) if flat_user[i] is t), None)
        if first is not None:
            duplicates[j] = first
    return duplicates


def value_range(t: torch.Tensor) -> list[int] | None:
    if t.dtype.is_floating_point or t.dtype.is_complex or t.numel() == 0:
        return None
    return [int(t.min()), int(t.max())]
