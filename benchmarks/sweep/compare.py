"""Is a backend's result eager's? Values, structure, and what user code reads off it.

`differs(got, want, tol)` compares two outputs leaf by leaf after aotc's plain_outputs
(a loaded bundle returns aotc's containers where eager returns transformers' objects; the
two flatten alike when the bundle is right). `access_differs` then reads, on both, what
user code reads: every field by attribute (`out.logits`), the first by position
(`out[0]`), and each cache layer's attributes (`out.past_key_values.layers[0].keys`,
`.conv_states[0]`, `get_seq_length()`).
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import torch

from aotc._torch_compat import pytree
from aotc.contract.outputs import plain_outputs

Step = tuple[str, Any]  # ("attr", name) | ("item", key) | ("call", method name)
_CACHE_SKIPPED = {"device", "dtype", "layers", "layer_class_to_replicate"}


def _close(got: Any, want: Any, tol: dict, noise: dict[int, float] | None = None) -> str | None:
    if isinstance(want, torch.Tensor):
        if noise and id(want) in noise:  # eager's own rounding for this tensor (see columns.Context)
            tol = dict(tol, atol=max(tol["atol"], noise[id(want)]))
        if not isinstance(got, torch.Tensor):
            return f"a {type(got).__name__} where eager has a tensor"
        if got.shape != want.shape or got.dtype != want.dtype:
            return f"{tuple(got.shape)} {got.dtype} where eager has {tuple(want.shape)} {want.dtype}"
        got, want = got.detach(), want.detach()
        if want.is_floating_point() or want.is_complex():
            if torch.allclose(got, want, equal_nan=True, **tol):
                return None
            worst = (got - want).abs().nan_to_num(float("inf")).max().item()
            return f"max abs difference {worst:.3g} (rtol {tol['rtol']}, atol {tol['atol']})"
        return None if torch.equal(got, want) else "integer values differ"
    if isinstance(got, torch.Tensor):
        return f"a tensor where eager has {want!r}"
    return None if got == want else f"{got!r} where eager has {want!r}"


def differs(got: Any, want: Any, tol: dict, noise: dict[int, float] | None = None) -> str | None:
    """None if `got` is eager's `want` (structure and every leaf within `tol`, its atol raised
    to `noise[id(leaf)]` where given), else why not."""
    got_leaves, got_spec = pytree.tree_flatten(plain_outputs(got))
    want_leaves, want_spec = pytree.tree_flatten(plain_outputs(want))
    if got_spec != want_spec:
        return f"structure {_short(got_spec)} where eager has {_short(want_spec)}"
    for i, (g, w) in enumerate(zip(got_leaves, want_leaves)):
        why = _close(g, w, tol, noise)
        if why:
            return f"output {i}: {why}"
    return None


def _short(spec: Any, limit: int = 160) -> str:
    text = str(spec).replace("\n", " ")
    return text if len(text) <= limit else text[:limit] + "..."


# ----------------------------------------------------------------------- user access


def _is_output(value: Any) -> bool:
    return hasattr(value, "keys") and hasattr(value, "to_tuple")  # transformers' / diffusers' ModelOutput


def _is_cache(value: Any) -> bool:
    return hasattr(value, "layers") and hasattr(value, "get_seq_length")


def _public(obj: Any) -> Iterator[tuple[str, Any]]:
    for name, value in vars(obj).items():
        if not name.startswith("_") and name not in _CACHE_SKIPPED:
            yield name, value


def user_paths(out: Any, depth: int = 0) -> Iterator[tuple[Step, ...]]:
    """The access paths user code takes on an eager output."""
    if depth > 4:
        return
    if _is_output(out):
        for key in out.keys():
            yield ("attr", key),
            for rest in user_paths(out[key], depth + 1):
                yield (("attr", key), *rest)
        if len(out.keys()):
            yield ("item", 0),
    elif _is_cache(out):
        yield ("call", "get_seq_length"),
        yield ("call", "__len__"),
        for i, layer in enumerate(out.layers):
            for name, value in _public(layer):
                yield ("attr", "layers"), ("item", i), ("attr", name)
                if isinstance(value, dict):
                    for key in value:
                        yield ("attr", "layers"), ("item", i), ("attr", name), ("item", key)
        for name, _ in _public(out):
            yield ("attr", name),
        for name in ("self_attention_cache", "cross_attention_cache"):
            if hasattr(out, name):
                for rest in user_paths(getattr(out, name), depth + 1):
                    yield (("attr", name), *rest)
    elif isinstance(out, (tuple, list)):
        for i, value in enumerate(out):
            yield ("item", i),
            for rest in user_paths(value, depth + 1):
                yield (("item", i), *rest)


def _follow(obj: Any, path: tuple[Step, ...]) -> Any:
    for kind, key in path:
        if kind == "attr":
            obj = getattr(obj, key)
        elif kind == "item":
            obj = obj[key]
        else:
            obj = len(obj) if key == "__len__" else getattr(obj, key)()
    return obj


def _outcome(read: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "value", read()
    except Exception as e:  # eager's own exception is the expected answer
        return "raises", type(e).__name__


def describe(path: tuple[Step, ...]) -> str:
    text = "out"
    for kind, key in path:
        text += f".{key}" if kind == "attr" else f"[{key!r}]" if kind == "item" else f".{key}()"
    return text.replace(".__len__()", " (len)")


def access_differs(got: Any, want: Any, tol: dict, noise: dict[int, float] | None = None) -> tuple[int, str | None]:
    """(paths read, None) if user code reads eager's values off `got`, else the first path that differs."""
    paths = list(user_paths(want))
    for path in paths:
        (want_kind, want_value), (got_kind, got_value) = _outcome(lambda: _follow(want, path)), \
            _outcome(lambda: _follow(got, path))
        if want_kind == "raises" or got_kind == "raises":
            if (want_kind, want_value) != (got_kind, got_value):
                shown = got_value if got_kind == "raises" else "a value"
                expected = want_value if want_kind == "raises" else "a value"
                return len(paths), f"{describe(path)}: {shown} where eager gives {expected}"
            continue
        why = differs(got_value, want_value, tol, noise)
        if why:
            return len(paths), f"{describe(path)}: {why}"
    return len(paths), None
