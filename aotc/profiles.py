"""Shape profiles: size ranges of a bundle's dynamic dims, each compiled into its own package.

A generic package serves every size the bundle accepts with size-generic kernels. A profile
(`aotc compile BUNDLE --profile x:0=1 --profile x:0=2..16`) narrows one or more dynamic dims
to a value or a range; its package is compiled for those sizes alone (a single value gives
static kernels), and each call runs the first profile whose ranges hold for its sizes.

A dim is named as `INPUT:DIM` (an input name and a dimension index, as `aotc export
--dynamic` takes it) or by its symbol (`s33`, as `aotc inspect` shows it). A dim a profile
does not name keeps the bundle's whole range.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from aotc.errors import InputError

_ITEM = re.compile(r"^(?P<name>[^=,]+)=(?P<lo>\d+)(?:\.\.(?P<hi>\d+))?$")


@dataclass(frozen=True)
class DimRange:
    """One dynamic dim of a bundle: its symbol, where it appears first (input name, dim
    index), and the sizes the bundle accepts (max None: unbounded)."""

    symbol: str
    input: str
    dim: int
    min: int
    max: int | None

    @property
    def label(self) -> str:
        return f"{self.input}:{self.dim}"


@dataclass(frozen=True)
class Profile:
    """Sizes per dim symbol, each an inclusive [lo, hi]; `text` as the user wrote it."""

    text: str
    ranges: tuple[tuple[str, int, int], ...]  # (symbol, lo, hi), sorted by symbol

    def range_of(self, symbol: str) -> tuple[int, int] | None:
        return next(((lo, hi) for s, lo, hi in self.ranges if s == symbol), None)

    def as_build(self) -> str:
        """The package's build fingerprint entry: `s33=1..1,s34=2..512`."""
        return ",".join(f"{s}={lo}..{hi}" for s, lo, hi in self.ranges)


def bundle_dims(bundle) -> list[DimRange]:
    """Every dynamic dim symbol of the bundle's user inputs, at its first appearance."""
    found: dict[str, DimRange] = {}
    for sig, meta in zip(bundle.signature.user_inputs, bundle.metadata.user_inputs):
        for dim, d in sorted(meta.dynamic_dims.items(), key=lambda kv: int(kv[0])):
            found.setdefault(d.symbol, DimRange(d.symbol, sig.name, int(dim), d.min, d.max))
    return list(found.values())


def parse(texts: list[str] | tuple[str, ...], dims: list[DimRange], where: str) -> list[Profile]:
    """The profiles `texts` ask for, checked against the bundle's dims (`where` names the
    bundle in errors): each names known dims inside their ranges, and no two overlap."""
    by_name = {d.symbol: d for d in dims} | {d.label: d for d in dims}
    if texts and not dims:
        raise InputError(f"{where} has no dynamic dims, so there is nothing for --profile to narrow; export it with "
                         "dynamic_shapes (aotc export --dynamic NAME:DIM).")
    profiles = [_parse_one(text, by_name, dims, where) for text in texts]
    for i, a in enumerate(profiles):
        for b in profiles[i + 1:]:
            if _overlap(a, b, dims):
                raise InputError(f"profiles '{a.text}' and '{b.text}' of {where} overlap: a call of sizes in both would "
                                 "have two packages. Make their ranges disjoint.")
    return profiles


def _known(dims: list[DimRange]) -> str:
    return ", ".join(f"{d.label} ({d.symbol}, {d.min}..{d.max if d.max is not None else 'inf'})" for d in dims)


def _parse_one(text: str, by_name: dict[str, DimRange], dims: list[DimRange], where: str) -> Profile:
    ranges: dict[str, tuple[int, int]] = {}
    for item in text.split(","):
        m = _ITEM.match(item.strip())
        if m is None:
            raise InputError(f"profile '{text}': '{item}' is not DIM=SIZE or DIM=LO..HI (e.g. x:0=1 or x:0=2..16).")
        d = by_name.get(m["name"].strip())
        if d is None:
            raise InputError(f"profile '{text}': {where} has no dynamic dim '{m['name']}'; it has {_known(dims)}.")
        lo, hi = int(m["lo"]), int(m["hi"] if m["hi"] is not None else m["lo"])
        if lo > hi:
            raise InputError(f"profile '{text}': {lo}..{hi} is an empty range for {d.label}.")
        if lo < d.min or (d.max is not None and hi > d.max):
            raise InputError(f"profile '{text}': {lo}..{hi} is outside the sizes {where} accepts for {d.label} "
                             f"({d.min}..{d.max if d.max is not None else 'inf'}). Export with a wider range, or "
                             "narrow the profile.")
        if d.symbol in ranges:
            raise InputError(f"profile '{text}' names {d.label} ({d.symbol}) twice.")
        ranges[d.symbol] = (lo, hi)
    return Profile(text, tuple(sorted((s, lo, hi) for s, (lo, hi) in ranges.items())))


def _overlap(a: Profile, b: Profile, dims: list[DimRange]) -> bool:
    """Whether some sizes lie in both: every dim's ranges meet (a dim one leaves out is whole)."""
    for d in dims:
        whole = (d.min, d.max if d.max is not None else 2**62)
        (alo, ahi), (blo, bhi) = a.range_of(d.symbol) or whole, b.range_of(d.symbol) or whole
        if ahi < blo or bhi < alo:
            return False
    return True
