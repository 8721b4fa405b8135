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
from aotc.contract.loss_inputs import LossOverInputs, model_args
from aotc.contract.subclasses import check_capturable, is_subclass
from aotc.errors import CaptureError
from aotc.sources.model_file import forward_arg_names


@dataclass(frozen=True)
class BoundCall:
    """Example inputs bound for capture (aotc.contract.call_inputs): tensors as leaves,
    every other input a node; `dynamic_shapes` rewritten to match (None if none was
    given); `constants` the inputs torch.export specializes on, named."""

    args: tuple
    kwargs: dict
    dynamic_shapes: ProgramShapes | None
    constants: list[ConstantInput]


def bind_call(model, args: tuple, kwargs: dict, dynamic_shapes: Any, loss=None) -> BoundCall:
    """`model(*args, **kwargs)`'s inputs as capture takes them: an int with a Dim in
    `dynamic_shapes` becomes a symbolic size, every other non-tensor input a constant."""
    names, paths = flat_user_names(model, args, kwargs, loss)
    leaves = pytree.tree_leaves((args, kwargs), is_leaf=call_inputs.atomic)
    extra = loss.input_names() if isinstance(loss, LossOverInputs) else []
    spec = user_dynamic_shapes(model, args, kwargs, dynamic_shapes, extra)
    spec_args = None if spec is None else (*spec["args"], *spec["kwargs"].values())
    flat_inputs = pytree.tree_flatten_with_path((*args, *kwargs.values()), is_leaf=call_inputs.atomic)[0]
    dynamic_ints = {
        i for i, (path, value) in enumerate(flat_inputs)
        if spec_args is not None and call_inputs.is_dynamic_int(value, spec_at(spec_args, path, (*args, *kwargs.values())))
    }
    b_args, b_kwargs = call_inputs.bind(args, kwargs, names, dynamic_ints)
    constants = [
        ConstantInput(name=n, path=p, type=call_inputs.constant_context(v)[0],
                      value=call_inputs.constant_context(v)[1])
        for i, (n, p, v) in enumerate(zip(names, paths, leaves))
        if not isinstance(v, torch.Tensor) and i not in dynamic_ints
    ]
    shapes = None
    if spec is not None:
        bound = call_inputs.adapt_dynamic_shapes((tuple(spec["args"]), spec["kwargs"]), (b_args, b_kwargs))
        shapes = ProgramShapes(*bound)
    return BoundCall(b_args, b_kwargs, shapes, constants)


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
