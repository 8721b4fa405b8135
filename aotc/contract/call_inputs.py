"""A call's inputs as a bundle takes them: tensors, and everything else as torch.export treats it.

torch.export takes inputs that are not tensors (bool, int, float, str, None) and
specializes each on its example value: the program holds that value and is valid for
it only. An int declared dynamic (a Dim in dynamic_shapes) stays a symbolic size. A
bundle's graphs take tensors only, so before capture aotc binds the call (`bind`): in
its pytree each such input becomes a node of this module, the tree's leaves are exactly
the graphs' tensor inputs, and its spec (signature.json's `in_spec`) records the rest:

- `Constant(value)`: no children; the spec holds the value. Every call must pass an
  equal value of the same type, or is refused by name (`CallForm`).
- `IntInput(carrier)`: an int declared dynamic, carried by an empty `(n, 0)` int64
  tensor (`(n + 2, 0)` where the example was 0 or 1, which torch would trace as
  constants), checked against its range as any dynamic dim.

The model sees plain values again (`unwrap`, in capture's Program and wherever aotc calls
an eager model). Containers of the user's own code (dataclasses registered with
`torch.export.register_dataclass`, namedtuples) are written to the spec as `InputRecord`
nodes, by type name and context, so that a bundle loads without that code; a call's own
container must have the same name and fields (aotc.contract.call_form, which also checks
a user's call against the spec).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools
import math
import sys
from typing import Any

import torch
from torch.export import Dim

from aotc._torch_compat import pytree
from aotc.errors import CaptureError

CONSTANT_TYPES = (bool, int, float, str, type(None), torch.Size)
TYPE_NAMES = {bool: "bool", int: "int", float: "float", str: "str", type(None): "None", torch.Size: "Size"}


def atomic(value: Any) -> bool:
    """Inputs taken whole, not as their leaves: a torch.Size (torch.export specializes it)."""
    return isinstance(value, torch.Size)


# ----------------------------------------------------------------------- the nodes


class Constant:
    """A non-tensor input torch.export specialized on: a pytree node without children."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __repr__(self) -> str:
        return f"Constant({self.value!r})"


def constant_context(value: Any) -> tuple[str, Any]:
    """A constant as the spec keeps it: its type's name beside the value, so that True and
    1 differ; a float that is not finite as its repr ('nan' equals 'nan')."""
    if isinstance(value, float) and not math.isfinite(value):
        return "float", repr(value)
    if isinstance(value, torch.Size):
        return "Size", tuple(value)
    return TYPE_NAMES[type(value)], value


def constant_value(context: tuple[str, Any]) -> Any:
    kind, value = context
    if kind == "Size":
        return torch.Size(value)
    return float(value) if kind == "float" and isinstance(value, str) else value


def load_constant(dumped) -> tuple[str, Any]:
    """A Constant's context from a bundle's JSON, checked (a bundle's JSON is untrusted)."""
    if not isinstance(dumped, list) or len(dumped) != 2 or dumped[0] not in TYPE_NAMES.values():
        raise ValueError("a constant input is [type, value] with type bool, int, float, str, None or Size")
    kind, value = dumped
    ok = {
        "bool": isinstance(value, bool),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": (isinstance(value, (int, float)) and not isinstance(value, bool))
        or value in ("nan", "inf", "-inf"),
        "str": isinstance(value, str),
        "None": value is None,
        "Size": isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                                for v in value),
    }[kind]
    if not ok:
        raise ValueError(f"a constant input of type {kind} has the value {value!r}")
    if kind == "Size":
        return kind, tuple(value)
    return kind, float(value) if kind == "float" and not isinstance(value, str) else value


# A carrier of an int whose example is 0 or 1 holds that many rows more: torch traces a
# dim of size 0 or 1 as that constant, while torch.export keeps such an int input symbolic.
# (Examples of 2 and up are carried as they are: torch then takes 0 and 1 for sizes it
# did not trace, which export's small-size check replays against eager.)
CARRIER_OFFSET = 2


class IntInput:
    """An int input declared dynamic, as an empty `(n + offset, 0)` tensor; `offset` is
    0, or CARRIER_OFFSET where the example was 0 or 1."""

    __slots__ = ("carrier", "offset")

    def __init__(self, carrier: torch.Tensor, offset: int = 0):
        self.carrier, self.offset = carrier, offset

    @staticmethod
    def of(n: int, offset: int = 0, device: torch.device | str = "cpu") -> "IntInput":
        return IntInput(torch.empty((n + offset, 0), dtype=torch.int64, device=device), offset)

    @property
    def value(self):
        return self.carrier.shape[0] - self.offset

    def __repr__(self) -> str:
        return f"IntInput({self.value if isinstance(self.carrier, torch.Tensor) else self.carrier})"


def _load_offset(dumped) -> int:
    if dumped not in (0, CARRIER_OFFSET) or isinstance(dumped, bool):
        raise ValueError(f"an int input's carrier is offset by 0 or {CARRIER_OFFSET}")
    return dumped


@dataclasses.dataclass(frozen=True)
class _CarrierKey(pytree.SequenceKey):
    """The carrier's key: index 0 (for dynamic_shapes, `[{0: dim}]`), printed as nothing,
    so that the carrier is named as the int it carries ('n', not 'n[0]')."""

    def __str__(self) -> str:
        return ""

    def get(self, node: IntInput) -> torch.Tensor:
        return node.carrier


class InputRecord:
    """A container of the user's code as a bundle records it: kind ("namedtuple", "node"
    for a registered pytree node such as a dataclass, "constant" for a type registered
    with pytree.register_constant), its type's name, and its JSON context."""

    __slots__ = ("kind", "type_name", "context", "children")

    def __init__(self, kind: str, type_name: str, context: Any, children: list):
        self.kind, self.type_name, self.context, self.children = kind, type_name, context, list(children)

    def __repr__(self) -> str:
        return f"{self.type_name}({', '.join(map(repr, self.children))})"


def _load_record(dumped) -> tuple:
    if (not isinstance(dumped, list) or len(dumped) != 3 or dumped[0] not in ("namedtuple", "node", "constant")
            or not isinstance(dumped[1], str)):
        raise ValueError("an input record is [kind, type name, context]")
    if dumped[0] == "namedtuple" and not (dumped[1].isidentifier() and isinstance(dumped[2], list)
                                          and all(isinstance(f, str) and f.isidentifier() for f in dumped[2])):
        raise ValueError("a namedtuple input is recorded by identifiers: its type name and fields")
    return dumped[0], dumped[1], frozen_json(dumped[2])


def frozen_json(value):
    """JSON made hashable and comparable as a TreeSpec context: lists become tuples."""
    if isinstance(value, list):
        return tuple(frozen_json(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, frozen_json(v)) for k, v in value.items())
    return value


def _thawed(value):
    if isinstance(value, tuple):
        return [_thawed(v) for v in value]
    return value


def _register() -> None:
    if Constant in pytree.SUPPORTED_NODES:
        return
    pytree.register_pytree_node(
        Constant, lambda c: ([], constant_context(c.value)), lambda _, ctx: Constant(constant_value(ctx)),
        serialized_type_name="aotc.Constant",
        to_dumpable_context=lambda ctx: [ctx[0], list(ctx[1]) if ctx[0] == "Size" else ctx[1]],
        from_dumpable_context=load_constant,
        flatten_with_keys_fn=lambda c: ([], constant_context(c.value)),
    )
    pytree.register_pytree_node(
        IntInput, lambda i: ([i.carrier], i.offset), lambda children, offset: IntInput(children[0], offset),
        serialized_type_name="aotc.IntInput",
        to_dumpable_context=lambda offset: offset, from_dumpable_context=_load_offset,
        flatten_with_keys_fn=lambda i: ([(_CarrierKey(0), i.carrier)], i.offset),
    )
    pytree.register_pytree_node(
        InputRecord, lambda r: (r.children, (r.kind, r.type_name, r.context)),
        lambda children, ctx: InputRecord(*ctx, children), serialized_type_name="aotc.InputRecord",
        to_dumpable_context=lambda ctx: [ctx[0], ctx[1], _thawed(ctx[2])], from_dumpable_context=_load_record,
        flatten_with_keys_fn=lambda r: ([(pytree.SequenceKey(i), c) for i, c in enumerate(r.children)],
                                        (r.kind, r.type_name, r.context)),
    )


_register()
NODES = (Constant, IntInput, InputRecord)


# ----------------------------------------------------------------------- capture side


def bind(args: tuple, kwargs: dict, names: list[str], dynamic_ints: set[int]) -> tuple[tuple, dict]:
    """(args, kwargs) with every leaf that is not a tensor made a node: an int whose flat
    position is in `dynamic_ints` an IntInput, the rest Constants. `names` are the flat
    leaves' names, for the refusal of a type torch.export does not take either."""
    leaves, spec = pytree.tree_flatten((args, kwargs), is_leaf=atomic)
    device = next((t.device for t in leaves if isinstance(t, torch.Tensor)), torch.device("cpu"))
    bound = []
    for i, (name, value) in enumerate(zip(names, leaves)):
        if isinstance(value, torch.Tensor):
            bound.append(value)
        elif i in dynamic_ints:
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise CaptureError(
                    f"dynamic_shapes declares input '{name}' dynamic, but it is {value!r}; a dynamic non-tensor "
                    "input must be an int of 0 or more. Give it None in dynamic_shapes to keep it constant."
                )
            bound.append(IntInput.of(value, CARRIER_OFFSET if value < 2 else 0, device))
        elif isinstance(value, CONSTANT_TYPES):
            bound.append(Constant(value))
        else:
            raise CaptureError(
                f"input '{name}' is a {type(value).__name__}; torch.export takes tensors, and bool, int, float, "
                "str and None as constants. Pass it as one of these, or make it part of the model."
            )
    return pytree.tree_unflatten(bound, spec)


def int_positions(tree: Any) -> set[int]:
    """Flat positions of a bound tree's leaves that are IntInput carriers."""
    leaves = pytree.tree_flatten_with_path(tree)[0]
    return {i for i, (path, _) in enumerate(leaves) if path and isinstance(path[-1], _CarrierKey)}


def is_dynamic_int(value: Any, dims: Any) -> bool:
    """Whether an example input and its dynamic_shapes entry make a symbolic int (as
    torch.export does: an int with a Dim or a hint other than STATIC)."""
    if not isinstance(value, int) or isinstance(value, bool) or dims is None or isinstance(dims, int):
        return False
    return getattr(dims, "name", None) != "STATIC"


_FRESH = itertools.count()


def carrier_dim(spec: Any, offset: int) -> Any:
    """The dynamic_shapes entry of an int input's carrier: the user's range as a Dim (a
    DYNAMIC hint's bounds too, which torch.export would raise to 2 on a tensor dim; the
    small-size check then replays 0 and 1), moved up by the carrier's offset; AUTO stays."""
    hint = getattr(spec, "type", None)  # a hint (AUTO, DYNAMIC) has a type; a Dim, perhaps shared, has none
    if not offset and (hint is None or hint.name == "AUTO"):
        return spec
    lo = getattr(spec, "min", None) or 0
    hi = getattr(spec, "max", None)
    name = getattr(spec, "__name__", None) or f"int{next(_FRESH)}"
    bounded = hi is not None and hi < sys.maxsize // 2
    return Dim(f"{name}_" if offset else name, min=max(lo, 0) + offset, max=hi + offset if bounded else None)


def adapt_dynamic_shapes(spec: Any, value: Any) -> Any:
    """A dynamic_shapes entry written for `value` as the user called, for its bound form:
    a constant takes an empty list (no children); an IntInput's range goes to its carrier's dim 0."""
    if isinstance(value, IntInput):
        return [{0: carrier_dim(spec, value.offset)}]
    if isinstance(value, Constant):
        return []  # torch.export matches a node's children: it has none
    if spec is None or isinstance(value, torch.Tensor):
        return spec
    if isinstance(value, (list, tuple)) and isinstance(spec, (list, tuple)) and len(spec) == len(value):
        return type(spec)(adapt_dynamic_shapes(s, v) for s, v in zip(spec, value))
    if isinstance(value, dict) and isinstance(spec, dict):
        return {k: adapt_dynamic_shapes(s, value[k]) if k in value else s for k, s in spec.items()}
    node = pytree.SUPPORTED_NODES.get(type(value))
    if node is not None and isinstance(spec, (list, tuple)):  # torch.export: a node's children, as a list
        children = node.flatten_fn(value)[0]
        if len(children) == len(spec):
            return type(spec)(adapt_dynamic_shapes(s, v) for s, v in zip(spec, children))
    return spec  # torch.export matches the rest, and refuses what does not fit


# ----------------------------------------------------------------------- back to values


def unwrap(tree: Any) -> Any:
    """`tree` with every node of this module replaced by the value a user passes: a
    Constant's value, an IntInput's int (a symbolic one under tracing), an InputRecord's
    container (the user's registered class when this process has it, else a stand-in)."""
    leaves, spec = pytree.tree_flatten(tree, is_leaf=lambda x: isinstance(x, NODES))
    if not any(isinstance(leaf, NODES) for leaf in leaves):
        return tree
    return pytree.tree_unflatten([_value(leaf) for leaf in leaves], spec)


def _value(leaf: Any) -> Any:
    if isinstance(leaf, Constant):
        return leaf.value
    if isinstance(leaf, IntInput):
        return leaf.value
    if isinstance(leaf, InputRecord):
        children = [unwrap(c) for c in leaf.children]
        if leaf.kind == "namedtuple":
            return made_namedtuple(leaf.type_name, tuple(leaf.context))(*children)
        cls = _registered_type(leaf.type_name)
        if cls is not None and leaf.kind == "constant" and dataclasses.is_dataclass(cls):
            return cls(**dict(leaf.context))
        if cls is not None and leaf.kind == "node":
            return pytree.SUPPORTED_NODES[cls].unflatten_fn(children, _python_context(leaf.context))
        return InputRecord(leaf.kind, leaf.type_name, leaf.context, children)
    return leaf


@functools.cache
def made_namedtuple(type_name: str, fields: tuple[str, ...]) -> type:
    """A namedtuple class of the user's name and fields (made once, from names only)."""
    return collections.namedtuple(type_name, fields)


def _registered_type(type_name: str) -> type | None:
    """The pytree node class named so that this process registered (never imported here)."""
    return next((cls for cls in pytree.SUPPORTED_NODES if type_name_of(cls) == type_name), None)


def type_name_of(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _python_context(context):
    """register_dataclass's context is a list of lists of field names."""
    return _thawed(context)
