"""`aotc bench BUNDLE --sizes DIM=N,N,...`: a compiled bundle's shape profiles (aotc.profiles)
timed at chosen sizes of one dynamic dim, against its generic package and eager.

At each size, in one process: the package the bundle runs there (a profile's, else the
generic one), the generic package alone (`aotc.load(..., profiles=False)`), and the
reference: eager (the --model file), else the fx graph, which export checked against eager.
Every variant's outputs are checked against the reference's before anything is timed; a
variant that differs is WRONG and is not timed. Timing is interleaved (one round of each
variant in turn, the order rotated each round): the median over rounds of each round's mean
time per call, and the rounds' min..max.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch

from aotc._torch_compat import pytree
from aotc.bundle.files import Bundle
from aotc.contract.outputs import load_spec
from aotc.errors import InputError
from aotc.exporters.aoti_profiles import parse_build
from aotc.profiles import DimRange, bundle_dims
from aotc.runtime import load
from aotc.runtime.inputs import random_inputs
from aotc.runtime.subclasses import caller_inputs
from aotc.sources.model_file import load_model

ROUND_SECONDS = 0.25  # each variant's time per round, about


@dataclass
class SizeResult:
    """One size: the package the bundle ran there, and each variant's time per call (ms)."""

    dim: str  # INPUT:DIM
    size: int
    package: str  # the profile's sizes as compiled ("s33=1..1"), or "generic"
    reference: str  # "eager" or "fx"
    ms: dict[str, float] = field(default_factory=dict)
    spread: dict[str, tuple[float, float]] = field(default_factory=dict)
    wrong: dict[str, str] = field(default_factory=dict)  # variant -> what differed (not timed)
    calls: int = 0  # per variant per round

    @property
    def speedup(self) -> float | None:
        """The generic package's time over the bundle's own (a profile's where one took the size)."""
        if "aotc" in self.ms and "aotc generic" in self.ms:
            return self.ms["aotc generic"] / self.ms["aotc"]
        return None


def parse_sizes(text: str, bundle: Bundle) -> tuple[DimRange, list[int]]:
    """'x:0=1,8,64' (or the dim's symbol): the dim, and sizes the bundle accepts for it."""
    dims = bundle_dims(bundle)
    name, _, values = text.partition("=")
    by_name = {d.symbol: d for d in dims} | {d.label: d for d in dims}
    dim = by_name.get(name.strip())
    if dim is None:
        have = ", ".join(f"{d.label} ({d.symbol})" for d in dims) or "none: it was exported with static shapes"
        raise InputError(f"--sizes '{text}': bundle '{bundle.path}' has no dynamic dim '{name}'; its dynamic dims: "
                         f"{have}.")
    try:
        sizes = [int(v) for v in values.split(",")]
    except ValueError:
        raise InputError(f"--sizes '{text}' is not DIM=N,N,... (e.g. x:0=1,8,64).") from None
    for n in sizes:
        if n < dim.min or (dim.max is not None and n > dim.max):
            raise InputError(f"--sizes '{text}': {n} is outside the sizes bundle '{bundle.path}' accepts for "
                             f"{dim.label} ({dim.min}..{dim.max if dim.max is not None else 'inf'}).")
    return dim, sizes


def package_for(bundle: Bundle, kind: str, device: str, symbol: str, size: int) -> str:
    """The profile a call of this size runs, as the runtime picks it (the first that holds)."""
    entries = [f for f in bundle.manifest.files
               if f.kind == "compiled" and f.graph == kind and f.device == device and (f.build or {}).get("profile")]
    for entry in sorted(entries, key=lambda f: int(f.path.removesuffix(".pt2").rsplit("_p", 1)[1])):
        ranges = parse_build(entry.build["profile"])
        if all(lo <= size <= hi for s, lo, hi in ranges if s == symbol):
            return entry.build["profile"]
    return "generic"


def _tensors(value) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def _differs(got, want) -> str | None:
    got, want = _tensors(got), _tensors(want)
    if len(got) != len(want):
        return f"{len(got)} tensor outputs where the reference gives {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        try:
            torch.testing.assert_close(g.detach().cpu(), w.detach().cpu(), rtol=1e-3, atol=1e-3)
        except AssertionError as e:
            return f"output {i}: " + " ".join(str(e).split())[:200]
    return None


def _round(call, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls * 1e3


def bench_sizes(path, sizes_text: str, model: str | None = None, rounds: int = 5, threads: int = 1,
                device: str = "cpu", trusted=(), public_keys=None, on_size=None) -> list[SizeResult]:
    """Each size of `sizes_text` timed as the module docstring says; `on_size(dim, size)`
    is told as each starts."""
    bundle = Bundle.open(path)
    if "inference" not in bundle.graph_kinds:
        raise InputError(f"--sizes times inference calls; bundle '{path}' holds {', '.join(bundle.graph_kinds)} "
                         "graphs. Time its training steps without --sizes.")
    dim, sizes = parse_sizes(sizes_text, bundle)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        variants = {"aotc": load(path, backend="aoti", device=device, trusted_subclasses=trusted,
                                      public_keys=public_keys)}
        has_generic = bundle.manifest.file(f"compiled/{torch.device(device).type}/inference.pt2") is not None
        if has_generic:
            variants["aotc generic"] = load(path, backend="aoti", device=device, trusted_subclasses=trusted,
                                                 public_keys=public_keys, profiles=False)
        if model is not None:
            reference, name = load_model(model).module.eval().to(device), "eager"
        else:
            reference, name = load(path, backend="fx", device=device, trusted_subclasses=trusted), "fx"
        variants = {name: reference, **variants}
        spec = load_spec(bundle.signature.in_spec)
        return [_one_size(bundle, dim, n, variants, name, rounds, device, spec, trusted, on_size) for n in sizes]
    finally:
        torch.set_num_threads(previous)


def _one_size(bundle, dim: DimRange, size: int, variants: dict, reference: str, rounds: int, device: str, spec,
              trusted, on_size) -> SizeResult:
    if on_size:
        on_size(dim.label, size)
    args, kwargs = caller_inputs(bundle, random_inputs(bundle.metadata, spec, seed=0, device=device,
                                                       sizes={dim.symbol: size}), trusted)
    result = SizeResult(dim.label, size, package_for(bundle, "inference", torch.device(device).type, dim.symbol, size),
                        reference)
    with torch.no_grad():
        want = variants[reference](*args, **kwargs)
        for name, fn in variants.items():
            problem = _differs(fn(*args, **kwargs), want) if name != reference else None
            if problem:
                result.wrong[name] = problem
        timed = [n for n in variants if n not in result.wrong]
        once = max(_round(lambda: variants[n](*args, **kwargs), 1) for n in timed)
        result.calls = max(2, int(ROUND_SECONDS * 1e3 / max(once, 1e-3)))
        times: dict[str, list[float]] = {n: [] for n in timed}
        for r in range(rounds):
            for name in timed[r % len(timed):] + timed[:r % len(timed)]:
                fn = variants[name]
                times[name].append(_round(lambda fn=fn: fn(*args, **kwargs), result.calls))
    result.ms = {n: statistics.median(t) for n, t in times.items()}
    result.spread = {n: (min(t), max(t)) for n, t in times.items()}
    return result
