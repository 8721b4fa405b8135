"""How a call's tensors relate to each other: the same object, views of one storage,
leaves or not. Capture, the eager references and the runtime's guard need the same
answers, so they are computed here once.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch

from aotc.errors import InputError


def storage_key(t: torch.Tensor) -> tuple:
    return (t.device, t.untyped_storage().data_ptr())


def storage_groups(flat: list) -> list[list[int]]:
    """Positions of distinct tensors that share a storage, one list per shared storage
    (the same tensor passed twice is a duplicate, not an alias, and is not listed)."""
    by_storage: dict[tuple, list[int]] = defaultdict(list)
    seen: set[int] = set()
    for i, t in enumerate(flat):
        # a tensor subclass has no storage of its own (its inner tensors do)
        if (isinstance(t, torch.Tensor) and id(t) not in seen and type(t) in (torch.Tensor, torch.nn.Parameter)
                and t.untyped_storage().nbytes() > 0):  # tensors without memory (int inputs' carriers) share none
            seen.add(id(t))
            by_storage[storage_key(t)].append(i)
    return [group for group in by_storage.values() if len(group) > 1]


def geometry(t: torch.Tensor) -> tuple[list[int], list[int], int]:
    return list(t.shape), list(t.stride()), t.storage_offset()


def may_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors on one storage may touch the same element (conservative: the
    spans of memory they reach intersect)."""
    if a.numel() == 0 or b.numel() == 0:
        return False

    def span(t):
        lo = hi = t.storage_offset()
        for size, stride in zip(t.shape, t.stride()):
            reach = (size - 1) * stride
            lo, hi = (lo + reach, hi) if reach < 0 else (lo, hi + reach)
        return lo * t.element_size(), (hi + 1) * t.element_size()

    (a_lo, a_hi), (b_lo, b_hi) = span(a), span(b)
    return a_lo < b_hi and b_lo < a_hi


def common_root(tensors: list[torch.Tensor]) -> torch.Tensor | None:
    """The one tensor all of `tensors` are differentiable views of (or are), else None."""
    roots = {id(t._base if t._base is not None else t): t._base if t._base is not None else t for t in tensors}
    if len(roots) != 1:
        return None
    (root,) = roots.values()
    return root if any(t._base is root for t in tensors) else None


def _dense(t: torch.Tensor) -> bool:
    """Non-overlapping and dense: some permutation of t's dims is contiguous."""
    expected = 1
    for stride, size in sorted((st, s) for s, st in zip(t.shape, t.stride()) if s != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _copy_root(root: torch.Tensor) -> torch.Tensor:
    """A new tensor with root's values, sizes and strides on a storage of its own, not a
    view; a non-leaf again if root was one (so in-place ops on its views stay legal)."""
    copy = torch.empty_strided(root.shape, root.stride(), dtype=root.dtype, device=root.device)
    copy.copy_(root.detach())
    if root.requires_grad:
        copy.requires_grad_(True)
        if not root.is_leaf:
            copy = copy.clone(memory_format=torch.preserve_format)
    return copy


def clone_like(flat: list) -> list:
    """Copies of `flat` that relate to each other as the originals do.

    The same tensor twice stays one object; views of one base become views of one copy
    of that base, with the same sizes, strides and offsets relative to it; other tensors
    sharing a storage share one copied storage; an input that requires grad and is not a
    leaf is again a non-leaf, so in-place ops on it are legal as they were for the caller.
    """
    memo: dict[int, torch.Tensor] = {}
    for group in storage_groups(flat):
        members = [flat[i] for i in group]
        root = common_root(members)
        if root is not None and _dense(root):
            copy = _copy_root(root)
            shift = copy.storage_offset() - root.storage_offset()
            for t in members:
                memo[id(t)] = copy if t is root else copy.as_strided(t.shape, t.stride(), t.storage_offset() + shift)
        else:
            storage = members[0].untyped_storage().clone()
            for t in members:
                view = torch.empty(0, dtype=t.dtype, device=t.device)
                view.set_(storage, t.storage_offset(), t.shape, t.stride())
                memo[id(t)] = view.requires_grad_(t.requires_grad)
    out = []
    for t in flat:
        if not isinstance(t, torch.Tensor):
            out.append(t)
            continue
        if id(t) not in memo:
            copy = t.detach().clone()
            if t.requires_grad:
                copy.requires_grad_(True)
                if not t.is_leaf:
                    copy = copy.clone()
            memo[id(t)] = copy
        out.append(memo[id(t)])
    return out


def synthetic_base(t: torch.Tensor) -> torch.Tensor:
    """The base AOTAutograd traces aliased, mutated inputs on: `t`'s autograd base, or (when
    it has none) a flat tensor over its whole storage."""
    if t._base is not None:
        return t._base
    whole = torch.empty(0, dtype=t.dtype, device=t.device)
    with torch.no_grad():
        whole.set_(t.untyped_storage())
    return whole


def realias(flat: list, groups) -> list:
    """`flat` with the members of each synthetic-base group (schema.AliasGroup) made into
    views of one new base laid out as at capture, holding the members' values; for making
    inputs (random ones, references) that a bundle with synthetic bases accepts."""
    out = list(flat)
    for group in groups:
        if group.synthetic_base is None:
            continue
        first = flat[group.members[0].input]
        extents = [(m.shape, m.stride, m.storage_offset) for m in group.members]
        extents.append((group.base.shape, group.base.stride, group.base.storage_offset))
        numel = max(off + sum((s - 1) * st for s, st in zip(shape, stride)) + 1 for shape, stride, off in extents)
        storage = torch.zeros(numel, dtype=first.dtype, device=first.device).untyped_storage()
        base = torch.empty(0, dtype=first.dtype, device=first.device)
        if group.kind == "view_base":
            base.set_(storage, group.base.storage_offset, group.base.shape, group.base.stride)
        for m in group.members:
            if group.kind == "view_base":
                view = base.as_strided(m.shape, m.stride, m.storage_offset)
            else:
                view = torch.empty(0, dtype=first.dtype, device=first.device)
                view.set_(storage, m.storage_offset, m.shape, m.stride)
            with torch.no_grad():
                view.copy_(flat[m.input])
            out[m.input] = view
    return out


def exact_copy(t: torch.Tensor) -> torch.Tensor:
    """A copy with t's sizes, strides and storage offset, on a copy of its storage."""
    copy = torch.empty(0, dtype=t.dtype, device=t.device)
    with torch.no_grad():
        copy.set_(t.untyped_storage().clone(), t.storage_offset(), t.shape, t.stride())
    return copy


@dataclass(frozen=True)
class StrideGuard:
    """The layout a compiled graph was built for, for one input. AOTInductor's code
    indexes its inputs with the strides it was compiled for and does not check them, so a
    tensor laid out otherwise is copied into that layout first (the caller's tensor stays
    as it is; mutations reach it through the epilogue).

    `stride` is the exact stride when sizes are static; else `order` (dims from the
    outermost in memory) says which dense layout the dynamic-size graph expects."""

    stride: tuple[int, ...] | None
    order: tuple[int, ...]

    @classmethod
    def of(cls, shape: list[int], stride: list[int], static: bool) -> "StrideGuard":
        order = tuple(sorted(range(len(shape)), key=lambda d: (-stride[d], -d)))
        return cls(tuple(stride) if static else None, order)

    def fit(self, t: torch.Tensor) -> torch.Tensor:
        if self.stride is None and t.is_contiguous() and self.order == tuple(range(t.dim())) and 1 not in t.shape:
            return t  # row-major with no size-1 dim: exactly the dense strides below
        expected = self.stride if self.stride is not None else dense_strides(t.shape, self.order)
        if t.stride() == expected or t.numel() <= 1:
            return t
        dims = self.broadcast_dims(t.shape)
        one = t
        for d in dims:  # an expanded input (stride 0): the compiled code reads one element along d
            one = one.narrow(d, 0, 1)
        if dims and not torch.equal(one.expand(t.shape), t):
            raise InputError(
                f"an input of shape {tuple(t.shape)} was exported expanded along dim(s) {dims} (stride 0), "
                "so the compiled code reads one element along them, and this one's values differ along "
                "them. Pass it expanded as at export, or export with an input that is not expanded."
            )
        out = torch.empty_strided(one.shape, expected, dtype=t.dtype, device=t.device)
        with torch.no_grad():
            out.copy_(one)
        return out.as_strided(t.shape, expected) if dims else out

    def broadcast_dims(self, shape) -> list[int]:
        """The dims the compiled layout reads with stride 0 (an expanded input)."""
        if self.stride is None:
            return []
        return [d for d, (n, s) in enumerate(zip(shape, self.stride)) if s == 0 and n > 1]

    def broadcast(self, t: torch.Tensor) -> torch.Tensor:
        """`t` with one value along each broadcast dim, as an expanded input has."""
        for d in self.broadcast_dims(t.shape):
            t = t.narrow(d, 0, 1).expand(t.shape)
        return t


def dense_strides(shape, order: tuple[int, ...]) -> tuple[int, ...]:
    strides = [0] * len(shape)
    step = 1
    for d in reversed(order):
        strides[d] = step
        step *= max(shape[d], 1)
    return tuple(strides)
