"""A graph narrowed to a shape profile (aotc.profiles) before AOTInductor compiles it.

The bundle's graph is exported once more with torch.export, on example inputs of sizes
inside the profile, each profile dim declared with the profile's range (a single size: a
static dim), every other dynamic dim with the bundle's whole range. Inductor then writes
kernels for those sizes alone: static shapes where the profile is one size.
"""

from __future__ import annotations

import torch

from aotc.errors import AotcError, InputError
from aotc.profiles import Profile

# graph kinds whose user inputs the metadata describes; a backward graph's inputs are saved
# activations, whose sizes follow the forward's
PROFILED_KINDS = ("inference", "joint")


def example_sizes(bundle, profile: Profile) -> dict[str, int]:
    """A size inside the profile per symbol it names: the export's example size where it fits,
    else the nearest end (2 or more where the range allows: torch specializes 0 and 1)."""
    examples: dict[str, int] = {}
    for meta in bundle.metadata.user_inputs:
        for dim, d in meta.dynamic_dims.items():
            examples.setdefault(d.symbol, meta.shape[int(dim)])
    return {s: lo if lo == hi else min(max(examples.get(s, lo), lo, 2), hi) for s, lo, hi in profile.ranges}


def narrowed(bundle, kind: str, program, profile: Profile, examples: list):
    """`program` (the bundle's `kind` graph) exported again on `examples` with the profile's ranges."""
    if kind not in PROFILED_KINDS:
        raise AotcError(f"the {kind} graph of '{bundle.path}' cannot be compiled for shape profiles yet: profiles "
                        f"take {', '.join(PROFILED_KINDS)} graphs. Compile this bundle without --profile.")
    ranges = {d.symbol: (d.min, d.max) for m in bundle.metadata.user_inputs for d in m.dynamic_dims.values()}
    dims: dict[str, object] = {}

    def dim(symbol: str):
        if symbol not in dims:
            lo, hi = profile.range_of(symbol) or ranges[symbol]
            dims[symbol] = None if lo == hi else torch.export.Dim(symbol, min=lo, max=hi)
        return dims[symbol]

    slots = bundle.signature.graphs[kind].inputs
    specs = []
    for slot, example in zip(slots, examples):
        meta = bundle.metadata.user_inputs[slot.index] if slot.role == "user_input" else None
        if meta is None or not meta.dynamic_dims:
            specs.append(None)
            continue
        specs.append({int(i): dim(d.symbol) for i, d in meta.dynamic_dims.items()})
    try:
        return torch.export.export(program.module(), tuple(examples), dynamic_shapes=tuple(specs), strict=False)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise AotcError(f"the {kind} graph of '{bundle.path}' could not be narrowed to profile '{profile.text}' "
                        f"({type(e).__name__}: {first}).") from e


def parse_build(text: str) -> tuple[tuple[str, int, int], ...]:
    """A package's `profile` fingerprint entry (Profile.as_build) back into (symbol, lo, hi)."""
    out = []
    for item in text.split(","):
        symbol, _, span = item.partition("=")
        lo, _, hi = span.partition("..")
        out.append((symbol, int(lo), int(hi)))
    return tuple(out)


def size_checks(bundle, kind: str, ranges) -> list[tuple[int, int, int, int]]:
    """(graph input position, dim, lo, hi) per profile symbol, at the symbol's first user input."""
    at: dict[str, tuple[int, int]] = {}
    for position, slot in enumerate(bundle.signature.graphs[kind].inputs):
        if slot.role == "user_input":
            for dim, d in bundle.metadata.user_inputs[slot.index].dynamic_dims.items():
                at.setdefault(d.symbol, (position, int(dim)))
    return [(*at[symbol], lo, hi) for symbol, lo, hi in ranges]


class ProfiledGraph:
    """Packages of one graph compiled for shape profiles, and the generic one (or None): each
    call runs the first profile whose sizes hold, comparing one size per dim symbol."""

    def __init__(self, profiled: list, generic, refusal: str):
        self._profiled = profiled  # [(size checks, CompiledGraph)]
        self._generic = generic
        self._refusal = refusal  # the InputError's words where no package takes the sizes
        first = profiled[0][1]
        self.frozen, self.layouts = first.frozen, first.layouts
        self.fast_call = self._fast if all(g.fast_call is not None for _, g in profiled) else None

    def pick(self, args):
        for checks, graph in self._profiled:
            if all(lo <= args[i].shape[d] <= hi for i, d, lo, hi in checks):
                return graph
        if self._generic is None:
            sizes = ", ".join(str(tuple(a.shape)) for a in args if isinstance(a, torch.Tensor) and a.dim())
            raise InputError(f"{self._refusal} (inputs of shapes {sizes[:300]})")
        return self._generic

    def _fast(self, args):
        return self.pick(args).fast_call(args)

    def __call__(self, *args):
        return self.pick(args)(*args)
