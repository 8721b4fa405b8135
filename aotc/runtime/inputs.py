"""Wrapper layers 1-3: check the call against the signature, dedupe, refuse bad aliasing.

Built once at load from metadata.json; on each call they cost a few comparisons per input.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from aotc._torch_compat import pytree
from aotc.bundle.schema import AliasGroup, Metadata, ProgramMeta, UserInput
from aotc.contract.aliasing import StrideGuard, geometry, may_overlap, realias, storage_key, synthetic_base
from aotc.errors import InputError

_DTYPES = {str(d).removeprefix("torch."): d for d in vars(torch).values() if isinstance(d, torch.dtype)}


@dataclass(frozen=True)
class InputCheck:
    """What one flat user input must look like. `static` is set when no dim is dynamic."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    dynamic: dict[int, tuple[str, int, int | None]]
    static: torch.Size | None
    int_offset: int | None = None  # an int input declared dynamic: its carrier holds n + this rows

    def check(self, value, device: torch.device, sizes: dict[str, tuple[int, str]]) -> None:
        if not isinstance(value, torch.Tensor):
            raise InputError(f"input '{self.name}' is a {type(value).__name__}; the bundle expects a tensor.")
        if value.dtype != self.dtype:
            raise InputError(
                f"input '{self.name}' has dtype {str(value.dtype).removeprefix('torch.')}; the bundle "
                f"expects {str(self.dtype).removeprefix('torch.')}. Convert it with .to({self.dtype})."
            )
        if value.device != device:
            raise InputError(
                f"input '{self.name}' is on {value.device}; the bundle was loaded for {device}. "
                f"Move it with .to('{device}')."
            )
        if self.static is not None:
            if value.shape != self.static:
                raise InputError(
                    f"input '{self.name}' has shape {tuple(value.shape)}; the bundle expects "
                    f"{tuple(self.static)} (no dynamic dims were exported; export with dynamic_shapes=, or aotc export --dynamic NAME:DIM)."
                )
            return
        self._check_dynamic(value, sizes)

    def _check_dynamic(self, value: torch.Tensor, sizes: dict[str, tuple[int, str]]) -> None:
        if value.dim() != len(self.shape):
            raise InputError(f"input '{self.name}' has shape {tuple(value.shape)}; the bundle expects {self.describe()}.")
        for i, size in enumerate(value.shape):
            if i not in self.dynamic:
                if size != self.shape[i]:
                    raise InputError(
                        f"input '{self.name}' has shape {tuple(value.shape)}; the bundle expects {self.describe()} "
                        f"(dim {i} is static)."
                    )
                continue
            symbol, lo, hi = self.dynamic[i]
            if self.int_offset is not None and (size < lo or (hi is not None and size > hi)):
                k = self.int_offset  # the carrier's size is the int plus this
                raise InputError(
                    f"input '{self.name}' is {size - k}, outside the exported range "
                    f"[{lo - k}, {'inf' if hi is None else hi - k}]. Re-export with a wider range."
                )
            if size < lo or (hi is not None and size > hi):
                raise InputError(
                    f"input '{self.name}' dim {i} is {size}, outside the exported range "
                    f"[{lo}, {'inf' if hi is None else hi}] of {symbol}. Re-export with a wider range."
                )
            seen = sizes.setdefault(symbol, (size, self.name if self.int_offset is not None else f"{self.name} dim {i}"))
            if seen[0] != size:
                here = (f"input '{self.name}' is {size - self.int_offset}" if self.int_offset is not None
                        else f"input '{self.name}' dim {i} is {size}")
                raise InputError(f"{here}, but {seen[1]} is {seen[0]}; both are {symbol} in the bundle and must be equal.")

    def describe(self) -> str:
        dims = [self.dynamic[i][0] if i in self.dynamic else str(s) for i, s in enumerate(self.shape)]
        return "(" + ", ".join(dims) + ")"


def build_checks(metadata: Metadata, user_inputs: list[UserInput], int_offsets: dict[str, int] | None = None
                 ) -> list[InputCheck]:
    """One check per flat tensor input; `int_offsets` (CallForm.int_offsets) for int inputs."""
    checks = []
    for spec, meta in zip(user_inputs, metadata.user_inputs, strict=True):
        dynamic = {int(k): (d.symbol, d.min, d.max) for k, d in meta.dynamic_dims.items()}
        checks.append(
            InputCheck(
                name=spec.name,
                dtype=_DTYPES[meta.dtype],
                shape=tuple(meta.shape),
                dynamic=dynamic,
                static=None if dynamic else torch.Size(meta.shape),
                int_offset=(int_offsets or {}).get(spec.name, 0) if spec.kind == "int" else None,
            )
        )
    return checks


@dataclass(frozen=True)
class AliasGuard:
    """The aliasing between user inputs that the program was captured with.

    The graphs are valid only for that pattern: a captured duplicate must be passed as
    the same tensor again; inputs traced on a synthetic base must again be views of one
    base, laid out as at capture; and a mutated input must not overlap another input
    unless it did at capture.
    """

    names: list[str]
    duplicates: dict[int, int]
    mutated: list[int]
    groups: list[AliasGroup]

    @property
    def active(self) -> bool:
        return bool(self.duplicates or self.mutated or self.groups)

    def check(self, flat: list[torch.Tensor]) -> None:
        for j, i in self.duplicates.items():
            if flat[j] is not flat[i]:
                raise InputError(
                    f"input '{self.names[j]}' was the same tensor as '{self.names[i]}' when the bundle "
                    "was captured, and the graph treats them as one. Pass the same tensor for both, "
                    "or re-export with distinct example inputs."
                )
        as_captured: set[tuple[int, int]] = set()
        for group in self.groups:
            if group.synthetic_base is not None:
                self._check_synthetic_base(group, flat)
            for a in group.members:
                for b in group.members:
                    if group.synthetic_base is not None or (
                        geometry(flat[a.input]) == (a.shape, a.stride, a.storage_offset)
                        and geometry(flat[b.input]) == (b.shape, b.stride, b.storage_offset)
                    ):
                        as_captured.add((a.input, b.input))
        for m in self.mutated:
            for k, other in enumerate(flat):
                if k == m or self.duplicates.get(k) == m or self.duplicates.get(m) == k or (m, k) in as_captured:
                    continue
                if storage_key(other) == storage_key(flat[m]) and may_overlap(flat[m], other):
                    raise InputError(
                        f"inputs '{self.names[m]}' and '{self.names[k]}' share memory, and "
                        f"'{self.names[m]}' is mutated in place. The bundle was captured with separate "
                        "tensors, so it cannot reproduce eager here. Pass separate tensors "
                        f"(e.g. {self.names[k]}.clone()), or export with example inputs that share "
                        "memory the same way."
                    )

    def _check_synthetic_base(self, group: AliasGroup, flat: list) -> None:
        names = ", ".join(f"'{self.names[m.input]}'" for m in group.members)
        layout = "; ".join(
            f"{self.names[m.input]}: shape {tuple(m.shape)}, stride {tuple(m.stride)}, offset {m.storage_offset}"
            for m in group.members
        )

        def refuse(why: str) -> None:
            raise InputError(
                f"inputs {names} were views of one tensor when the bundle was captured ({layout}), "
                f"and its graph relies on that; in this call {why}. Pass them laid out as at "
                "capture, or re-export with example inputs that alias the way these do."
            )

        owner = flat[group.base.input]
        if group.kind == "view_base" and owner._base is None:
            refuse(f"'{self.names[group.base.input]}' is not a view")
        base = synthetic_base(owner)
        if geometry(base) != (group.base.shape, group.base.stride, group.base.storage_offset):
            refuse(f"their base has shape {tuple(base.shape)}, stride {tuple(base.stride())}")
        for m in group.members:
            t = flat[m.input]
            if storage_key(t) != storage_key(base):
                refuse(f"'{self.names[m.input]}' does not share memory with the others")
            if group.kind == "view_base" and t is not base and t._base is not base:
                refuse(f"'{self.names[m.input]}' is not a view of the same tensor as the others")
            if geometry(t) != (m.shape, m.stride, m.storage_offset):
                refuse(
                    f"'{self.names[m.input]}' has shape {tuple(t.shape)}, stride {tuple(t.stride())}, "
                    f"offset {t.storage_offset()}"
                )


def build_guard(program: ProgramMeta, user_inputs: list[UserInput]) -> AliasGuard:
    duplicates = {int(k): v for k, v in program.duplicate_user_inputs.items()}
    by_name = {u.name: i for i, u in enumerate(user_inputs)}
    mutated = [
        by_name[i.name]
        for i in program.inputs
        if i.kind == "user_input" and i.mutation_type != "NOT_MUTATED"
    ]
    return AliasGuard([u.name for u in user_inputs], duplicates, mutated, program.aliased_inputs)


def random_inputs(metadata: Metadata, in_spec, seed: int = 0, device: str | torch.device = "cpu",
                  vary_dynamic: bool = False, sizes: dict[str, int] | None = None):
    """(args, kwargs) of random tensors shaped like the example inputs: floats from a normal
    distribution, integers and bools within the example's value range. With
    `vary_dynamic`, each dynamic size is drawn from its exported range (capped at twice
    the example's), the same for every input that shares it; `sizes` sets some (dim symbol
    -> size)."""

    g = torch.Generator().manual_seed(seed)
    sizes = dict(sizes or {})
    flat = []
    for meta in metadata.user_inputs:
        shape = list(meta.shape)
        for dim, d in meta.dynamic_dims.items():
            if d.symbol in sizes and not vary_dynamic:
                shape[int(dim)] = sizes[d.symbol]
        if vary_dynamic:
            for dim, d in meta.dynamic_dims.items():
                if d.symbol not in sizes:
                    example = meta.shape[int(dim)]
                    hi = min(d.max if d.max is not None else 2 * example, 2 * example)
                    lo = min(max(d.min, 1), hi)
                    sizes[d.symbol] = int(torch.randint(lo, hi + 1, (), generator=g))
                shape[int(dim)] = sizes[d.symbol]
        dtype = _DTYPES[meta.dtype]
        if dtype.is_floating_point or dtype.is_complex:
            t = torch.randn(shape, generator=g, dtype=dtype)
        else:
            lo, hi = meta.value_range or [0, 1]
            t = torch.randint(lo, hi + 1, shape, generator=g).to(dtype)
        # laid out as the example was: compiled graphs are built for that layout
        guard = StrideGuard.of(meta.shape, meta.stride, static=not meta.dynamic_dims)
        flat.append(guard.fit(guard.broadcast(t.to(device))))
    groups = next((p.aliased_inputs for p in metadata.programs.values() if p.aliased_inputs), [])
    return pytree.tree_unflatten(realias(flat, groups), in_spec)


@dataclass(frozen=True)
class CallStructure:
    """How the exported call was made: positional count and keywords in capture order.

    A caller may pass keywords in any order (`**tokenizer(...)` puts token_type_ids before
    attention_mask); pytree's dict spec records one order, so a call is rearranged to it
    before flattening. A keyword the bundle does not take, or one it misses, is a named
    error listing what it takes.
    """

    positional: int | None  # None: not an (args, kwargs) spec (then nothing is rearranged)
    keywords: tuple[str, ...]

    @staticmethod
    def of(in_spec) -> "CallStructure":
        children = in_spec.children() if in_spec.type is tuple and in_spec.num_children == 2 else None
        if children is None or children[0].type is not tuple or children[1].type is not dict:
            return CallStructure(None, ())
        keywords = tuple(children[1].context)
        if not all(isinstance(k, str) for k in keywords):
            return CallStructure(None, ())
        return CallStructure(children[0].num_children, keywords)

    def arrange(self, args: tuple, kwargs: dict) -> dict:
        """`kwargs` in capture order; raises InputError naming a keyword that differs (a
        difference in positional inputs is left to the caller's structure error)."""
        if self.positional is None:
            return kwargs
        parts = [f"{self.positional} positional input(s)"] if self.positional else []
        parts += [f"keywords {', '.join(self.keywords)}"] if self.keywords else []
        takes = " and ".join(parts) or "no inputs"
        unknown = [k for k in kwargs if k not in self.keywords]
        missing = [k for k in self.keywords if k not in kwargs]
        if unknown:
            raise InputError(
                f"keyword input(s) {', '.join(repr(k) for k in unknown)} are not inputs of this bundle; it takes "
                f"{takes}. Leave them out, or re-export with them among the example inputs."
            )
        if missing:
            raise InputError(
                f"keyword input(s) {', '.join(repr(k) for k in missing)} are missing; the bundle was exported with "
                f"{takes}, and its graph needs every one."
            )
        return {k: kwargs[k] for k in self.keywords}
