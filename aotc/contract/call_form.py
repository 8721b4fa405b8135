"""A user's call checked against a bundle's inputs, and its spec made portable.

The runtime side of aotc.contract.call_inputs: `CallForm` takes a call made with plain
values (constants, ints) and gives the graphs' tensors, refusing by name a constant
that differs from the exported one; `portable` writes the user's own input containers
as InputRecords, so that a spec can be written and compared without their classes;
`describe_spec`/`describe_call` put a structure mismatch in a user's words.
"""

from __future__ import annotations

import dataclasses
import json
from collections import OrderedDict, defaultdict, deque
from dataclasses import dataclass
from typing import Any

import torch

from aotc._torch_compat import pytree
from aotc.contract.call_inputs import (
    NODES,
    CONSTANT_TYPES,
    TYPE_NAMES,
    Constant,
    atomic,
    InputRecord,
    IntInput,
    frozen_json,
    type_name_of,
    constant_context,
    constant_value,
)
from aotc.errors import CaptureError, InputError

# ----------------------------------------------------------------------- portable specs

_BUILTIN = (tuple, list, dict, OrderedDict, defaultdict, deque)


def portable(spec: pytree.TreeSpec, where: str = "input") -> pytree.TreeSpec:
    """`spec` with each node of the user's own types as an InputRecord (name and JSON
    context), so that it can be written and compared without those types. A context
    that JSON cannot hold is a CaptureError naming the type."""
    if spec.is_leaf() or (spec.type in _BUILTIN or spec.type in NODES or spec.type is type(None)):
        if spec.is_leaf():
            return spec
        children = [portable(c, where) for c in spec.children()]
        return spec if children == spec.children() else pytree.TreeSpec(spec.type, spec.context, children)
    children = [portable(c, where) for c in spec.children()]
    if spec.type is pytree.namedtuple:
        cls = spec.context
        context = ("namedtuple", cls.__name__, tuple(cls._fields))
    elif isinstance(spec.context, pytree.ConstantNode):  # pytree.register_constant: a value, no leaves
        value = spec.context.value
        data = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else repr(value)
        try:
            context = ("constant", type_name_of(spec.type), frozen_json(json.loads(json.dumps(data))))
        except (TypeError, ValueError) as e:
            raise CaptureError(f"an {where} is a {spec.type.__name__} registered as a pytree constant whose "
                               f"fields aotc cannot write as JSON ({e}); make them numbers, bools or str.") from e
    else:
        try:
            dumped = json.loads(json.dumps(spec.context))
        except (TypeError, ValueError) as e:
            raise CaptureError(
                f"an {where} is a {spec.type.__name__}, a pytree node whose context aotc cannot write as JSON "
                f"({e}); pass its tensors in a dict, tuple or a dataclass registered with "
                "torch.export.register_dataclass."
            ) from e
        context = ("node", type_name_of(spec.type), frozen_json(dumped))
    return pytree.TreeSpec(InputRecord, context, children)


# ----------------------------------------------------------------------- runtime side

_LEAF = pytree.tree_flatten(0)[1]


@dataclass(frozen=True)
class Slot:
    """What one leaf of a user's call must be: a tensor, an int (a dynamic IntInput) or a
    constant (its spec context)."""

    kind: str  # "tensor", "int" or "constant"
    constant: tuple[str, Any] | None = None
    offset: int = 0  # an int's carrier holds this many rows more (call_inputs.IntInput)


def _raw(spec: pytree.TreeSpec, slots: list[Slot]) -> pytree.TreeSpec:
    if spec.type is Constant:
        slots.append(Slot("constant", spec.context))
        return _LEAF
    if spec.type is IntInput:
        slots.append(Slot("int", offset=spec.context))
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

    def int_offsets(self) -> dict[str, int]:
        """Each int input's name -> how many rows its carrier holds beyond the int."""
        return {name: slot.offset for slot, name in zip(self.slots, self.names) if slot.kind == "int"}

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

    @staticmethod
    def flatten(tree: Any) -> tuple[list, pytree.TreeSpec]:
        """A call's leaves as a bundle takes them (a torch.Size is one leaf: a constant)."""
        return pytree.tree_flatten(tree, is_leaf=atomic)

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
                if not isinstance(value, int) or isinstance(value, bool):
                    raise InputError(
                        f"input '{name}' is a {type(value).__name__}; the bundle takes an int there (exported "
                        "as a dynamic size)."
                    )
                if value < 0:
                    raise InputError(f"input '{name}' is {value}; the bundle takes an int of 0 or more there.")
                flat.append(IntInput.of(value, slot.offset, device).carrier)
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
    """The exported value, of the exported type: an int for a float constant is refused too,
    since a model may treat them apart (`torch.tensor(scale)` is int64 for an int)."""
    if not isinstance(value, CONSTANT_TYPES) or TYPE_NAMES[type(value)] != context[0]:
        return False
    return constant_context(value) == context


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
    leaves, spec = pytree.tree_flatten(tree, is_leaf=atomic)
    leaves = iter(leaves)

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
