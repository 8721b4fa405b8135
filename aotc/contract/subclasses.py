"""Tensor subclasses as bundles hold them: described at capture, rebuilt at load.

A traceable wrapper subclass (`__tensor_flatten__`/`__tensor_unflatten__`, e.g.
torchao's Int8Tensor) is stored as its inner tensors plus a SubclassTensor: its class
as `module:qualname`, its flatten context as JSON, and its outer size, stride and dtype,
as AOTAutograd's SubclassCreationMeta records it. Nothing here unpickles: a context
is plain data (numbers, strings, lists, tuples, dicts, dtypes, devices, sizes) or it is
refused at capture.

At load a class is imported only when it is trusted: torch's and torchao's own
classes, and those the user names (`trusted_subclasses=`, `--trust module:Class`).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from aotc import _torch_compat as tc
from aotc.bundle.subclasses_schema import SubclassTensor
from aotc.errors import BundleError, CaptureError, InputError, UntrustedSubclassError

# Packages whose tensor classes aotc imports without being told: the engines it is built on.
DEFAULT_TRUSTED_PACKAGES = ("torch", "torchao")
# Traceable subclasses whose meaning a graph of inner tensors cannot keep.
_REFUSED = {
    "DTensor": "a DTensor is a shard of a tensor spread over processes",
    "NestedTensor": "a nested tensor holds rows of different lengths",
}


def is_subclass(t: Any) -> bool:
    """A tensor that is not a plain tensor or Parameter (a Parameter of a subclass is the subclass)."""
    return isinstance(t, torch.Tensor) and type(t) not in (torch.Tensor, torch.nn.Parameter)


def class_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


# ------------------------------------------------------------------ flatten contexts

_TAGS = ("$dict", "$tuple", "$dtype", "$device", "$size")


def encode_context(value: Any, where: str = "") -> Any:
    """A flatten context as JSON: dicts, tuples, dtypes, devices and sizes tagged
    ({"$dtype": "float32"}), so decode_context gives back an equal value. Anything
    else is refused: a bundle never stores an object it would have to unpickle."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value
    if isinstance(value, torch.dtype):
        return {"$dtype": str(value).removeprefix("torch.")}
    if isinstance(value, torch.device):
        return {"$device": str(value)}
    if isinstance(value, torch.Size):
        return {"$size": [int(v) for v in value]}
    if isinstance(value, list):
        return [encode_context(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, tuple) and type(value) is tuple:
        return {"$tuple": [encode_context(v, f"{where}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"$dict": {k: encode_context(v, f"{where}[{k!r}]") for k, v in value.items()}}
    raise _NotPlainData(where or "the context", value)


class _NotPlainData(Exception):
    def __init__(self, where: str, value: Any):
        super().__init__(f"{where} is a {type(value).__name__}")
        self.where, self.value = where, value


def decode_context(data: Any, where: str) -> Any:
    """The value encode_context stored; a BundleError naming `where` for anything else."""
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if isinstance(data, list):
        return [decode_context(v, f"{where}[{i}]") for i, v in enumerate(data)]
    if isinstance(data, dict) and len(data) == 1 and next(iter(data)) in _TAGS:
        tag, body = next(iter(data.items()))
        if tag == "$dict" and isinstance(body, dict):
            return {k: decode_context(v, f"{where}.{k}") for k, v in body.items()}
        if tag == "$tuple" and isinstance(body, list):
            return tuple(decode_context(v, f"{where}[{i}]") for i, v in enumerate(body))
        if tag == "$dtype" and isinstance(body, str) and isinstance(getattr(torch, body, None), torch.dtype):
            return getattr(torch, body)
        if tag == "$device" and isinstance(body, str):
            try:
                return torch.device(body)
            except RuntimeError:
                pass
        if tag == "$size" and isinstance(body, list) and all(type(v) is int and v >= 0 for v in body):
            return torch.Size(body)
    raise BundleError(f"{where}: {str(data)[:80]} is not a flatten context aotc writes")


# ------------------------------------------------------------------ capture side


def check_capturable(t: torch.Tensor, name: str) -> None:
    """Refuse a subclass whose graph of inner tensors would not mean the same."""
    reason = _REFUSED.get(type(t).__name__)
    if reason is None and not tc.is_traceable_wrapper_subclass(t):
        reason = "it has no __tensor_flatten__/__tensor_unflatten__ (not a traceable wrapper subclass)"
    if reason is not None:
        raise CaptureError(
            f"'{name}' is a {type(t).__name__}, which aotc cannot store: {reason}. Pass a plain tensor, "
            "or a traceable wrapper subclass (like torchao's quantized tensors)."
        )


def describe(t: torch.Tensor, name: str) -> SubclassTensor:
    """The SubclassTensor of `t`, nested subclasses included."""
    check_capturable(t, name)
    attrs, context = t.__tensor_flatten__()
    try:
        encoded = encode_context(context)
    except _NotPlainData as e:
        raise CaptureError(
            f"'{name}' is a {type(t).__name__} whose __tensor_flatten__ context holds "
            f"{type(e.value).__name__} at {e.where}; a bundle stores only plain data (numbers, strings, "
            "lists, tuples, dicts, dtypes, devices), as it never pickles. Use a configuration whose "
            "tensors flatten to plain data."
        ) from None
    if decode_context(encoded, name) != context:
        raise CaptureError(f"the __tensor_flatten__ context of '{name}' does not survive JSON; aotc cannot store it.")
    inner = {}
    for attr in attrs:
        value = getattr(t, attr)
        if not isinstance(value, torch.Tensor):
            raise CaptureError(f"'{name}' ({type(t).__name__}) has an inner '{attr}' that is not a tensor.")
        inner[attr] = describe(value, f"{name}:{attr}") if is_subclass(value) else None
    return SubclassTensor(
        class_name=class_name(type(t)),
        context=encoded,
        inner=inner,
        shape=list(t.shape),
        stride=list(t.stride()),
        dtype=str(t.dtype).removeprefix("torch."),
        requires_grad=t.requires_grad,
    )


def inner_paths(meta: SubclassTensor) -> list[tuple[str, ...]]:
    """Paths of the plain tensors inside, in flatten order: [("qdata",), ("scale",), ...]."""
    paths = []
    for attr, sub in meta.inner.items():
        if sub is None:
            paths.append((attr,))
        else:
            paths.extend((attr, *rest) for rest in inner_paths(sub))
    return paths


def inner_names(name: str, meta: SubclassTensor) -> list[str]:
    """The graphs' names of the plain tensors inside: `<name>:<attr>[:<attr>...]`."""
    return [":".join((name, *path)) for path in inner_paths(meta)]


def plain_tensors(t: torch.Tensor) -> list[torch.Tensor]:
    """The plain tensors inside `t`, in flatten order (nested subclasses included)."""
    out = []
    for attr in t.__tensor_flatten__()[0]:
        value = getattr(t, attr)
        out.extend(plain_tensors(value) if is_subclass(value) else [value])
    return out


def named_plain(name: str, t: Any) -> list[tuple[str, Any]]:
    """[(name, t)] for a plain tensor; a subclass's plain tensors named `name:attr...`."""
    if not is_subclass(t):
        return [(name, t)]
    return [pair for attr in t.__tensor_flatten__()[0] for pair in named_plain(f"{name}:{attr}", getattr(t, attr))]


def dense_leaves(values: Iterable[Any]) -> list[Any]:
    """`values` with every subclass replaced by its plain tensors."""
    return [v for x in values for _, v in named_plain("", x)]


# ------------------------------------------------------------------ load side


def check_trust(info: Any, trusted: Iterable[str | type] = ()) -> None:
    """Refuse, before anything of the bundle is loaded, a class that is not trusted.
    `info` is metadata.json's `subclasses` (schema.Subclasses) or None."""
    if info is None:
        return
    trusted = list(trusted)

    def walk(meta: SubclassTensor):
        yield meta.class_name
        for sub in meta.inner.values():
            if sub is not None:
                yield from walk(sub)

    for group in (info.state, info.inputs, info.outputs):
        for meta in group.values():
            for name in walk(meta):
                if not is_trusted(name, trusted):
                    resolve_class(name, trusted)  # raises UntrustedSubclassError, naming it


@dataclass(frozen=True)
class Rebuilder:
    """A SubclassTensor with its class resolved: builds the subclass from plain tensors."""

    cls: type
    context: Any
    inner: tuple[tuple[str, Rebuilder | None], ...]
    size: torch.Size
    stride: tuple[int, ...]
    count: int  # plain tensors it takes

    @classmethod
    def of(cls, t: torch.Tensor) -> Rebuilder:
        """The rebuilder of `t` itself (capture: its class and context as they are in memory)."""
        attrs, context = t.__tensor_flatten__()
        inner = tuple((a, cls.of(getattr(t, a)) if is_subclass(getattr(t, a)) else None) for a in attrs)
        count = sum(1 if sub is None else sub.count for _, sub in inner)
        return cls(type(t), context, inner, t.size(), tuple(t.stride()), count)

    def plain(self, t: torch.Tensor) -> list[torch.Tensor]:
        """The plain tensors inside `t`, in the order `build` takes them (fake tensors too)."""
        out = []
        for attr, sub in self.inner:
            value = getattr(t, attr)
            out.extend([value] if sub is None else sub.plain(value))
        return out

    def build(self, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        inner, at = {}, 0
        for attr, sub in self.inner:
            if sub is None:
                inner[attr] = tensors[at]
                at += 1
            else:
                inner[attr] = sub.build(tensors[at : at + sub.count])
                at += sub.count
        return self.cls.__tensor_unflatten__(inner, self.context, self.size, self.stride)

    def check(self, t: Any, name: str) -> None:
        """A caller's input must be this class with this context and size: the graphs
        were traced for them (as torch.compile guards on them)."""

        if type(t) is not self.cls:
            raise InputError(
                f"'{name}' is a {type(t).__name__}; the bundle was exported with a "
                f"{self.cls.__name__} there."
            )
        context = t.__tensor_flatten__()[1]
        if context != self.context or t.size() != self.size:
            raise InputError(
                f"'{name}' is a {self.cls.__name__} of size {tuple(t.size())} with flatten context "
                f"{context!r}; the bundle was exported for size {tuple(self.size)} and context {self.context!r}."
            )
        for attr, sub in self.inner:
            if sub is not None:
                sub.check(getattr(t, attr), f"{name}:{attr}")


def resolve(meta: SubclassTensor, trusted: Iterable[str | type] = (), where: str = "") -> Rebuilder:
    """Import `meta`'s classes, only those trusted, and check they are tensor subclasses."""
    cls = resolve_class(meta.class_name, trusted, where)
    context = decode_context(meta.context, f"{where}.context")
    inner = tuple((attr, None if sub is None else resolve(sub, trusted, f"{where}.inner.{attr}"))
                  for attr, sub in meta.inner.items())
    count = sum(1 if sub is None else sub.count for _, sub in inner)
    return Rebuilder(cls, context, inner, torch.Size(meta.shape), tuple(meta.stride), count)


def is_trusted(name: str, trusted: Iterable[str | type] = ()) -> bool:
    module = name.partition(":")[0]
    if module.split(".")[0] in DEFAULT_TRUSTED_PACKAGES:
        return True
    return any((t if isinstance(t, str) else class_name(t)) == name for t in trusted)


def resolve_class(name: str, trusted: Iterable[str | type] = (), where: str = "") -> type:
    module, _, qualname = name.partition(":")
    if not module or not qualname or not all(p.isidentifier() for p in [*module.split("."), *qualname.split(".")]):
        raise BundleError(f"{where}: '{name}' is not a class name (module:qualname)")
    if not is_trusted(name, trusted):
        raise UntrustedSubclassError(
            f"the bundle holds tensors of class '{name}', which aotc imports only when you trust it: "
            f"importing '{module}' runs its code. If you trust it, pass trusted_subclasses=['{name}'] "
            f"to aotc.load (or --trust {name} on the command line)."
        )
    try:
        value: Any = importlib.import_module(module)
        for part in qualname.split("."):
            value = getattr(value, part)
    except (ImportError, AttributeError) as e:
        raise BundleError(
            f"{where}: class '{name}' cannot be imported here ({type(e).__name__}: {e}); install the "
            "package that defines it."
        ) from e
    if not (isinstance(value, type) and issubclass(value, torch.Tensor) and hasattr(value, "__tensor_unflatten__")):
        raise BundleError(f"{where}: '{name}' is not a tensor subclass with __tensor_unflatten__")
    return value
