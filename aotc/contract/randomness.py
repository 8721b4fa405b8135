"""Whether a graph draws random numbers, decided from what each op does with its arguments.

torch tags every op that *may* draw from the generator `nondeterministic_seeded`. The tag
alone is too coarse: SDPA's CPU kernel carries it for its `dropout_p` argument, which is 0
in eval, so on the tag alone every attention model would count as random. An op draws
only when its arguments say so:

- `dropout_p` (the attention kernels): random only when not 0;
- `train` (dropout, native_dropout, ...): random only when true;
- `p` of a dropout op: random only when not 0.

An argument that is not a constant in the graph (a symbol, a tensor) counts as random.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

# argument name -> the constant value with which the op draws nothing
_DETERMINISTIC_WHEN = {"dropout_p": 0.0, "train": False}


def _arguments(node: torch.fx.Node) -> dict[str, Any]:
    """The node's arguments by schema name, defaults filled in."""
    schema = node.target._schema
    bound: dict[str, Any] = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args) and not arg.kwarg_only:
            bound[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            bound[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
    return bound


def _is_constant(value: Any, constant: Any) -> bool:
    return isinstance(value, (bool, int, float)) and not isinstance(value, torch.fx.Node) and value == constant


def draws_random(node: torch.fx.Node) -> bool:
    """True when `node` calls an op that draws from torch's generator with these arguments."""
    op = node.target
    if node.op != "call_function" or not isinstance(op, torch._ops.OpOverload):
        return False
    if torch.Tag.nondeterministic_seeded not in op.tags:
        return False
    args = _arguments(node)
    for name, constant in _DETERMINISTIC_WHEN.items():
        if name in args and _is_constant(args[name], constant):
            return False
    if "dropout" in op._schema.name and "p" in args and _is_constant(args["p"], 0.0):
        return False
    return True


def random_ops(graph: torch.fx.Graph) -> list[str]:
    """The ops of `graph` that draw random numbers, by name, sorted; empty when none do."""
    return sorted({str(n.target) for n in graph.nodes if draws_random(n)})


@contextlib.contextmanager
def callers_random_state_kept():
    """torch's generators as the caller had them, whatever runs inside: export runs the model
    eagerly in training mode (its references and checks) and seeds torch for it, so the
    caller's next draw would be another than without the export. CUDA's generators only
    where CUDA has started: reading them would start it. Usable as a decorator."""
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        yield
