"""A graph narrowed to a shape profile (aotc.profiles) before AOTInductor compiles it.

The bundle's graph is exported once more with torch.export, on example inputs of sizes
inside the profile, each profile dim declared with the profile's range (a single size: a
static dim), every other dynamic dim with the bundle's whole range. Inductor then writes
kernels for those sizes alone: static shapes where the profile is one size.

A backward graph is compiled for each profile as its forward is, and a call's backward runs
the package of the profile its forward ran (aotc.runtime.autograd_fn): the saved
activations it takes were made at that profile's sizes.
"""

from __future__ import annotations

import torch

from aotc.errors import AotcError, InputError
from aotc.profiles import Profile


def narrows(bundle, kind: str, profile: Profile) -> bool:
    """Whether the `kind` graph's own inputs have a dynamic dim the profile names. Where none
    has (a decode graph, compiled for one token already), the graph gets no package for the
    profile, and its one package serves every call."""
    program = bundle.metadata.programs.get("forward" if kind == "backward" else kind)
    symbols = {d.symbol for i in (program.inputs if program else []) if i.kind == "user_input" and i.tensor
               for d in i.tensor.dynamic_dims.values()}
    return any(s in symbols for s, _, _ in profile.ranges)


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
    ranges = {d.symbol: (d.min, d.max) for m in bundle.metadata.user_inputs for d in m.dynamic_dims.values()}
    dims: dict[str, object] = {}

    def dim(symbol: str):
        if symbol not in dims:
            lo, hi = profile.range_of(symbol) or ranges[symbol]
            dims[symbol] = torch.export.Dim.STATIC if lo == hi else torch.export.Dim(symbol, min=lo, max=hi)
        return dims[symbol]

    if kind == "backward":
        specs = _backward_specs(bundle, program, dim)
    else:
        specs = []
        for slot in bundle.signature.graphs[kind].inputs:
            meta = bundle.metadata.user_inputs[slot.index] if slot.role == "user_input" else None
            specs.append({int(i): dim(d.symbol) for i, d in meta.dynamic_dims.items()}
                         if meta and meta.dynamic_dims else None)
    try:
        return torch.export.export(program.module(), tuple(examples), dynamic_shapes=tuple(specs), strict=False)
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise AotcError(f"the {kind} graph of '{bundle.path}' could not be narrowed to profile '{profile.text}' "
                        f"({type(e).__name__}: {first}).") from e


def _backward_specs(bundle, program, dim) -> list:
    """Per backward input, its dynamic dims named by the bundle's symbols: each input is an
    output of the forward graph (a saved activation, or a tangent of a user output), whose
    sizes the forward gives in its own symbols, tied to the bundle's by its user inputs. A
    dim of some other size (2*s) is left for torch.export to derive (Dim.AUTO)."""
    forward = bundle.exported_program("forward").graph
    fw_sig = bundle.signature.graphs["forward"]
    named: dict[str, str] = {}  # the forward graph's symbol -> the bundle's
    for node, slot in zip(forward.find_nodes(op="placeholder"), fw_sig.inputs):
        if slot.role == "user_input":
            for i, d in bundle.metadata.user_inputs[slot.index].dynamic_dims.items():
                named.setdefault(str(node.meta["val"].shape[int(i)]), d.symbol)
    made = dict(zip((s.name for s in fw_sig.outputs), forward.find_nodes(op="output")[0].args[0]))
    specs = []
    for node, slot in zip(program.graph.find_nodes(op="placeholder"), bundle.signature.graphs["backward"].inputs):
        source = made.get(slot.name if slot.role == "saved" else slot.target)
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or not isinstance(source, torch.fx.Node):
            specs.append(None)
            continue
        spec = {}
        for i, (size, made_size) in enumerate(zip(val.shape, source.meta["val"].shape)):
            if isinstance(size, torch.SymInt):
                symbol = named.get(str(made_size))
                spec[i] = dim(symbol) if symbol is not None else torch.export.Dim.AUTO
        specs.append(spec or None)
    return specs


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
    call runs the first profile whose sizes hold, comparing one size per dim symbol. A
    backward graph's profiles have no checks: it runs the one its forward ran (`at`)."""

    def __init__(self, profiled: list, generic, refusal: str):
        self._profiled = profiled  # [(label: the build's "profile", size checks or None, CompiledGraph)]
        self._generic = generic
        self._refusal = refusal  # the InputError's words where no package takes the sizes
        first = profiled[0][2]  # a CompiledGraph, or a wrapper of one (map)
        self.frozen, self.layouts = getattr(first, "frozen", False), getattr(first, "layouts", None)
        self.labels = [label for label, _, _ in profiled]
        fast = all(getattr(g, "fast_call", None) is not None for _, _, g in profiled)
        self.fast_call = self._fast if fast else None

    def label(self, args) -> str | None:
        """The profile these inputs' sizes lie in first, or None for the generic package."""
        for label, checks, _ in self._profiled:
            if checks is None:
                raise AotcError("internal error: a backward graph's profile is the one its forward ran (at).")
            if all(lo <= args[i].shape[d] <= hi for i, d, lo, hi in checks):
                return label
        if self._generic is None:
            sizes = ", ".join(str(tuple(a.shape)) for a in args if isinstance(a, torch.Tensor) and a.dim())
            raise InputError(f"{self._refusal} (inputs of shapes {sizes[:300]})")
        return None

    def at(self, label: str | None):
        """The package of profile `label` (None: the generic one)."""
        if label is None:
            return self._generic
        return next(g for name, _, g in self._profiled if name == label)

    def map(self, wrap) -> "ProfiledGraph":
        """The same profiles, each package (and the generic one) as `wrap(package)`."""
        return ProfiledGraph([(n, c, wrap(g)) for n, c, g in self._profiled],
                             wrap(self._generic) if self._generic is not None else None, self._refusal)

    def pick(self, args):
        return self.at(self.label(args))

    def _fast(self, args):
        return self.pick(args).fast_call(args)

    def __call__(self, *args):
        return self.pick(args)(*args)
