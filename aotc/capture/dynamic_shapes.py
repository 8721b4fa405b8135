"""dynamic_shapes as users write them, and the ranges torch.export reports back.

Users write dynamic_shapes against their model's forward, as torch.export documents it.
aotc traces `Program` (the model, maybe followed by its loss) with keyword inputs passed
positionally, so the spec is rewritten for that call; and the range of each dim is the
one torch.export reports (the declared one, or the narrower one it proved: see ranges),
not the one its trace assumed (sizes >= 2).
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from typing import Any

from torch.export import ExportedProgram

from aotc.bundle.schema import TensorMeta
from aotc.capture.metadata import finite_int
from aotc.capture.range_guards import Narrowing
from aotc.errors import CaptureError
from aotc.sources.model_file import FunctionModule, forward_arg_names


@dataclass(frozen=True)
class ProgramShapes:
    """dynamic_shapes already rewritten for Program's `(*args, **kwargs)` (by
    aotc.capture.inputs.bind_call): one entry per positional input and per keyword."""

    args: tuple
    kwargs: dict


def user_dynamic_shapes(model, args: tuple, kwargs: dict, spec: Any, loss_names: list[str] = ()) -> Any:
    """The user's dynamic_shapes, written against the model's forward as torch.export
    documents it (a dict keyed by forward's parameter names, or a tuple in their order;
    a `*args` or `**kwargs` parameter takes a tuple or dict of its own), for Program,
    whose forward is `(*args, **kwargs)`. `loss_names` name the last positional inputs,
    which only the loss reads (aotc.contract.loss_inputs): the spec may name them too."""
    if spec is None:
        return None
    if isinstance(spec, ProgramShapes):
        return {"args": spec.args, "kwargs": spec.kwargs}
    if callable(getattr(spec, "dynamic_shapes", None)):  # torch.export.ShapesCollection, AdditionalInputs
        spec = spec.dynamic_shapes(model, args, kwargs)
    if loss_names:
        return _with_loss_inputs(model, args, kwargs, spec, list(loss_names))
    target = model.fn if isinstance(model, FunctionModule) else model.forward
    try:
        bound = inspect.signature(target).bind(*args, **kwargs)
    except (TypeError, ValueError):
        bound = None
    params = bound.signature.parameters if bound is not None else {}
    names = list(bound.arguments) if bound is not None else forward_arg_names(model, args, kwargs) + list(kwargs)
    if isinstance(spec, (list, tuple)):
        if len(spec) != len(names):
            raise CaptureError(
                f"dynamic_shapes is a {type(spec).__name__} of {len(spec)}; {type(model).__name__}.forward "
                f"is called with {len(names)} input(s) ({', '.join(names)}). Give one entry per input, "
                "or a dict keyed by these names."
            )
        spec = dict(zip(names, spec))
    if not isinstance(spec, dict):
        raise CaptureError(
            f"dynamic_shapes is a {type(spec).__name__}; expected a dict keyed by forward's "
            "argument names, or a tuple in argument order (torch.export's format)."
        )
    unknown = set(spec) - set(names)
    if unknown:
        raise CaptureError(
            f"dynamic_shapes names {sorted(unknown)}, which are not inputs of "
            f"{type(model).__name__}.forward in this call (inputs: {', '.join(names)})."
        )

    def kind(name):
        p = params.get(name)
        return p.kind if p is not None else None

    # Where each positional argument and keyword went in forward's signature.
    arg_specs, position = [], 0
    for name in names:
        if position >= len(args):
            break
        if kind(name) is inspect.Parameter.VAR_POSITIONAL:
            count = len(bound.arguments[name])
            sub = spec.get(name)
            arg_specs += list(sub) if sub is not None else [None] * count
            position += count
        elif kind(name) is not inspect.Parameter.VAR_KEYWORD:
            arg_specs.append(spec.get(name))
            position += 1
    kw_specs = {}
    for key in kwargs:
        if key in names and kind(key) is not inspect.Parameter.VAR_KEYWORD:
            kw_specs[key] = spec.get(key)
        else:  # gathered by forward's **kwargs parameter
            var_kw = next((n for n in names if kind(n) is inspect.Parameter.VAR_KEYWORD), None)
            kw_specs[key] = (spec.get(var_kw) or {}).get(key) if var_kw else spec.get(key)
    # torch.export binds these to Program.forward(*args, **kwargs): an empty group has no key
    return {"args": tuple(arg_specs), "kwargs": kw_specs}


def _with_loss_inputs(model, args: tuple, kwargs: dict, spec: Any, loss_names: list[str]) -> dict:
    """user_dynamic_shapes for a call whose last positional inputs only the loss reads:
    a dict spec may name them, a tuple spec may end with their entries."""
    n = len(loss_names)
    model_args, loss_spec = args[: len(args) - n], [None] * n
    if isinstance(spec, dict):
        loss_spec = [spec.get(name) for name in loss_names]
        spec = {k: v for k, v in spec.items() if k not in loss_names}
    elif isinstance(spec, (list, tuple)) and len(spec) > n:
        try:  # model inputs, then the loss inputs
            model_spec = user_dynamic_shapes(model, model_args, kwargs, spec[: len(spec) - n])
            return {"args": (*model_spec["args"], *spec[len(spec) - n:]), "kwargs": model_spec["kwargs"]}
        except CaptureError:
            pass  # the model's inputs alone
    model_spec = user_dynamic_shapes(model, model_args, kwargs, spec)
    return {"args": (*model_spec["args"], *loss_spec), "kwargs": model_spec["kwargs"]}


def declared_ranges(ep: ExportedProgram) -> dict[str, tuple[int, int | None]]:
    """The range torch.export reports per symbol, and per size expression of a derived
    dim (`2*s0`) as it appears in input shapes."""
    return {
        str(sym): (finite_int(vr.lower) or 0, finite_int(vr.upper))
        for sym, vr in ep.range_constraints.items()
        if getattr(sym, "free_symbols", None)
    }


def with_narrowings(metas: list[TensorMeta], narrowings: list[Narrowing]) -> list[TensorMeta]:
    """`metas` (one per flat user input) with the declared range and the reason kept on
    every dim torch.export narrowed; the range itself is already the one it proved."""
    metas = list(metas)
    for n in narrowings:
        for index, dim in n.places:
            d = metas[index].dynamic_dims.get(str(dim))
            if d is None:
                continue
            d = dataclasses.replace(
                d,
                declared_min=n.declared_min if d.min > n.declared_min else None,
                declared_max=n.declared_max if d.max is not None and (n.declared_max is None or d.max < n.declared_max) else None,
                narrowed_by=n.reason,
            )
            metas[index] = dataclasses.replace(metas[index], dynamic_dims={**metas[index].dynamic_dims, str(dim): d})
    return metas
