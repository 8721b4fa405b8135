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
  tensor whose dim 0 is the int, so it is checked against its range as any dynamic dim.

The model sees plain values again (`unwrap`, in capture's Program and wherever aotc calls
an eager model). Containers of the user's own code (dataclasses registered with
`torch.export.register_dataclass`, namedtuples) are written to the spec as `InputRecord`
nodes, by type name and context (`portable`), so that a bundle loads without that code;
a call's own container must have the same name and fields.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import OrderedDict, defaultdict, deque
from dataclasses import dataclass
from typing import Any

import torch

from aotc._torch_compat import pytree
from aotc.contract.outputs import NamedTupleOutput
from aotc.errors import CaptureError, InputError

CONSTANT_TYPES = (bool, int, float, str, type(None))
_TYPE_NAMES = {bool: "bool", int: "int", float: "float", str: "str", type(None): "None"}


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
    return _TYPE_NAMES[type(value)], value


def constant_value(context: tuple[str, Any]) -> Any:
    kind, value = context
    return float(value) if kind == "float" and isinstance(value, str) else value


def _load_constant(dumped) -> tuple[str, Any]:
    """A Constant's context from a bundle's JSON, checked (a bundle's JSON is untrusted)."""
    if not isinstance(dumped, list) or len(dumped) != 2 or dumped[0] not in _TYPE_NAMES.values():
        raise ValueError("a constant input is [type, value] with type bool, int, float, str or None")
    kind, value = dumped
    ok = {
        "bool": isinstance(value, bool),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": (isinstance(value, (int, float)) and not isinstance(value, bool))
        or value in ("nan", "inf", "-inf"),
        "str": isinstance(value, str),
        "None": value is None,
    }[kind]
    if not ok:
        raise ValueError(f"a constant input of type {kind} has the value {value!r}")
    return kind, float(value) if kind == "float" and not isinstance(value, str) else value


class IntInput:
    """An int input declared dynamic, as an empty `(n, 0)` tensor: its size is the int."""

    __slots__ = ("carrier",)

    def __init__(self, carrier: torch.Tensor):
        self.carrier = carrier

    @staticmethod
    def of(n: int, device: torch.device | str = "cpu") -> "IntInput":
        return IntInput(torch.empty((n, 0), dtype=torch.int64, device=device))

    @property
    def value(self):
        return self.carrier.shape[0]

    def __repr__(self) -> str:
        return f"IntInput({self.value if isinstance(self.carrier, torch.Tensor) else self.carrier})"


@dataclasses.dataclass(frozen=True)
class _CarrierKey(pytree.SequenceKey):
    """The carrier's key: index 0 (for dynamic_shapes, `[{0: dim}]`), printed as nothing,
    so that the carrier is named as the int it carries ('n', not 'n[0]')."""

    def __str__(self) -> str:
        return ""


class InputRecord:
    """A container of the user's code (a registered dataclass, a namedtuple) as a bundle
    records it: kind ("namedtuple" or "node"), type name, and its JSON context."""

    __slots__ = ("kind", "type_name", "context", "children")

    def __init__(self, kind: str, type_name: str, context: Any, children: list):
        self.kind, self.type_name, self.context, self.children = kind, type_name, context, list(children)

    def __repr__(self) -> str:
        return f"{self.type_name}({', '.join(map(repr, self.children))})"


def _load_record(dumped) -> tuple:
    if (not isinstance(dumped, list) or len(dumped) != 3 or dumped[0] not in ("namedtuple", "node")
            or not isinstance(dumped[1], str)):
        raise ValueError("an input record is [kind, type name, context]")
    return dumped[0], dumped[1], _frozen(dumped[2])


def _frozen(value):
    """JSON made hashable and comparable as a TreeSpec context: lists become tuples."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _frozen(v)) for k, v in value.items())
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
        to_dumpable_context=lambda ctx: list(ctx), from_dumpable_context=_load_constant,
        flatten_with_keys_fn=lambda c: ([], constant_context(c.value)),
    )
    pytree.register_pytree_node(
        IntInput, lambda i: ([i.carrier], None), lambda children, _: IntInput(children[0]),
        serialized_type_name="aotc.IntInput",
        to_dumpable_context=lambda _: None, from_dumpable_context=lambda _: None,
        flatten_with_keys_fn=lambda i: ([(_CarrierKey(0), i.carrier)], None),
    )
    pytree.register_pytree_node(
        InputRecord, lambda r: (r.children, (r.kind, r.type_name, r.context)),
        lambda children, ctx: InputRecord(*ctx, children), serialized_type_name="aotc.InputRecord",
        to_dumpable_context=lambda ctx: [ctx[0], ctx[1], _thawed(ctx[2])], from_dumpable_context=_load_record,
        flatten_with_keys_fn=lambda r: ([(pytree.SequenceKey(i), c) for i, c in enumerate(r.children)],
                                        (r.kind, r.type_name, r.context)),
    )


_register()
_NODES = (Constant, IntInput, InputRecord)


# ----------------------------------------------------------------------- capture side


def bind(args: tuple, kwargs: dict, names: list[str], dynamic_ints: set[int]) -> tuple[tuple, dict]:
    """(args, kwargs) with every leaf that is not a tensor made a node: an int whose flat
    position is in `dynamic_ints` an IntInput, the rest Constants. `names` are the flat
    leaves' names, for the refusal of a type torch.export does not take either."""
    leaves, spec = pytree.tree_flatten((args, kwargs))
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
            bound.append(IntInput.of(value, device))
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


def adapt_dynamic_shapes(spec: Any, value: Any) -> Any:
    """A dynamic_shapes entry written for `value` as the user called, for its bound form:
    a constant takes an empty list (no children); an IntInput's Dim goes to its carrier's dim 0."""
    if isinstance(value, IntInput):
        return [{0: spec}]
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
    leaves, spec = pytree.tree_flatten(tree, is_leaf=lambda x: isinstance(x, _NODES))
    if not any(isinstance(leaf, _NODES) for leaf in leaves):
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
            return NamedTupleOutput(leaf.type_name, leaf.context, children)
        cls = _registered_type(leaf.type_name)
        if cls is not None:
            return pytree.SUPPORTED_NODES[cls].unflatten_fn(children, _python_context(leaf.context))
        return InputRecord(leaf.kind, leaf.type_name, leaf.context, children)
    return leaf


def _registered_type(type_name: str) -> type | None:
    """The pytree node class named so that this process registered (never imported here)."""
    return next((cls for cls in pytree.SUPPORTED_NODES if _type_name(cls) == type_name), None)


def _type_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _python_context(context):
    """register_dataclass's context is a list of lists of field names."""
    return _thawed(context)


# ----------------------------------------------------------------------- portable specs

_BUILTIN = (tuple, list, dict, OrderedDict, defaultdict, deque)


def portable(spec: pytree.TreeSpec, where: str = "input") -> pytree.TreeSpec:
    """`spec` with each node of the user's own types as an InputRecord (name and JSON
    context), so that it can be written and compared without those types. A context
    that JSON cannot hold is a CaptureError naming the type."""
    if spec.is_leaf() or (spec.type in _BUILTIN or spec.type in _NODES or spec.type is type(None)):
        if spec.is_leaf():
            return spec
        children = [portable(c, where) for c in spec.children()]
        return spec if children == spec.children() else pytree.TreeSpec(spec.type, spec.context, children)
    children = [portable(c, where) for c in spec.children()]
    if spec.type is pytree.namedtuple:
        cls = spec.context
        context = ("namedtuple", cls.__name__, tuple(cls._fields))
    else:
        try:
            dumped = json.loads(json.dumps(spec.context))
        except (TypeError, ValueError) as e:
            raise CaptureError(
                f"an {where} is a {spec.type.__name__}, a pytree node whose context aotc cannot write as JSON "
                f"({e}); pass its tensors in a dict, tuple or a dataclass registered with "
                "torch.export.register_dataclass."
            ) from e
        context = ("node", _type_name(spec.type), _frozen(dumped))
    return pytree.TreeSpec(InputRecord, context, children)


# ----------------------------------------------------------------------- runtime side

_LEAF = pytree.tree_flatten(0)[1]


@dataclass(frozen=True)
class Slot:
    """What one leaf of a user's call must be: a tensor, an int (a dynamic IntInput) or a
    constant (its spec context)."""

    kind: str  # "tensor", "int" or "constant"
    constant: tuple[str, Any] | None = None


def _raw(spec: pytree.TreeSpec, slots: list[Slot]) -> pytree.TreeSpec:
    if spec.type is Constant:
        slots.append(Slot("constant", spec.context))
        return _LEAF
    if spec.type is IntInput:
        slots.append(Slot("int"))
        return _LEAF
    if spec.is_leaf():
        slots.append(Slot("tensor"))
        return spec
    return pytree.TreeSpec(spec.type, spec.context, [_raw(c, slots) for c in spec.children()])


def _describe(context: tuple[str, Any]) -> str:
    value = constant_value(context)
    return repr(value)


@dataclass(frozen=True)
class CallForm:
    """A bundle's inputs as a user passes them: its in_spec with every Constant and
    IntInput as a plain leaf (`raw_spec`), and what each leaf must be. Built once at load;
    used only when a call's spec is not the bundle's own (a call with plain values)."""

    raw_spec: pytree.TreeSpec
    slots: tuple[Slot, ...]
    names: tuple[str, ...]  # per leaf, the user input or constant it is

    @property
    def active(self) -> bool:
        return any(s.kind != "tensor" for s in self.slots)

    @staticmethod
    def of(in_spec: pytree.TreeSpec, tensor_names: list[str], constant_names: list[str]) -> "CallForm":
        slots: list[Slot] = []
        raw = _raw(in_spec, slots)
        tensors, constants = iter(tensor_names), iter(constant_names)
        names = tuple(next(constants, "?") if s.kind == "constant" else next(tensors, "?") for s in slots)
        return CallForm(raw, tuple(slots), names)

    def matches(self, spec: pytree.TreeSpec) -> bool:
        return spec == self.raw_spec or (not _plain(spec) and _safe_portable(spec) == self.raw_spec)

    def tensors(self, leaves: list, device: torch.device) -> list:
        """The graphs' tensor inputs from a call's leaves (laid out as `raw_spec`): each
        constant checked against the exported value, each int made its carrier."""
        flat = []
        for slot, name, value in zip(self.slots, self.names, leaves, strict=True):
            if slot.kind == "tensor":
                flat.append(value)
            elif slot.kind == "int":
                if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.is_floating_point():
                    value = int(value)
                if not isinstance(value, int) or isinstance(value, bool):
                    raise InputError(
                        f"input '{name}' is a {type(value).__name__}; the bundle takes an int there (exported "
                        "as a dynamic size)."
                    )
                if value < 0:
                    raise InputError(f"input '{name}' is {value}; the bundle takes an int of 0 or more there.")
                flat.append(IntInput.of(value, device).carrier)
            elif not _same_constant(value, slot.constant):
                raise InputError(
                    f"input '{name}' is {_shown(value)}; the bundle was exported with {name}={_describe(slot.constant)}, "
                    "and torch.export specialized its graphs on that value. Pass "
                    f"{_describe(slot.constant)}, or export again with the value you need (one bundle per value; "
                    "an int can be declared dynamic in dynamic_shapes instead)."
                )
        return flat


def _shown(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, CONSTANT_TYPES):
        return repr(value)
    return f"a {type(value).__name__}"


def _same_constant(value: Any, context: tuple[str, Any]) -> bool:
    if not isinstance(value, CONSTANT_TYPES):
        return False
    kind = context[0]
    if kind == "float":  # an int that equals the float is the same number to the model
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        ok = _TYPE_NAMES[type(value)] == kind
    return ok and constant_context(float(value) if kind == "float" else value) == context


def _plain(spec: pytree.TreeSpec) -> bool:
    """Whether `spec` holds builtin containers only (nothing `portable` would change)."""
    if spec.is_leaf():
        return True
    return (spec.type in _BUILTIN or spec.type is type(None)) and all(_plain(c) for c in spec.children())


def _safe_portable(spec: pytree.TreeSpec) -> pytree.TreeSpec | None:
    try:
        return portable(spec)
    except CaptureError:
        return None


def describe_spec(spec: pytree.TreeSpec, names: list[str]) -> str:
    """A bundle's inputs as a user would write the call: tensor inputs by name, constants
    by value, dynamic ints as `name: int`."""
    names = iter(names)

    def show(s: pytree.TreeSpec) -> str:
        if s.type is Constant:
            return _describe(s.context)
        if s.type is IntInput:
            return f"{next(names, '?')} (int)"
        if s.is_leaf():
            return next(names, "?")
        return _container(s.type, s.context, [show(c) for c in s.children()])

    return show(spec)


def describe_call(tree: Any) -> str:
    """A call's inputs in the same words: tensors as 'tensor', other values by repr."""
    spec = pytree.tree_flatten(tree)[1]
    leaves = iter(pytree.tree_leaves(tree))

    def show(s: pytree.TreeSpec) -> str:
        if s.is_leaf():
            value = next(leaves)
            return "tensor" if isinstance(value, torch.Tensor) else _shown(value)
        return _container(s.type, s.context, [show(c) for c in s.children()])

    return show(spec)


def _container(kind, context, parts: list[str]) -> str:
    if kind is tuple:
        return f"({', '.join(parts)}{',' if len(parts) == 1 else ''})"
    if kind is list:
        return f"[{', '.join(parts)}]"
    if kind in (dict, OrderedDict, defaultdict):
        return "{" + ", ".join(f"{k!r}: {p}" for k, p in zip(context, parts)) + "}"
    name = context[1] if kind is InputRecord else getattr(context, "__name__", None) or getattr(kind, "__name__", "node")
    return f"{name}({', '.join(parts)})"
