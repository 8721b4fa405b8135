"""The `aoti` format: each graph compiled ahead of time by AOTInductor.

`compiled/<device>/<kind>.pt2` is an AOTInductor package. The graphs take parameters and
buffers as inputs, so a package holds code only: the weights stay in
weights.safetensors, stored once for every graph and device. CPU inference graphs are
compiled frozen by default, their weights folded in at load (exporters/aoti_frozen.py).

Compiling and its cache are exporters/aoti_cache.py's; this module picks how each graph
is built and loads packages as callables.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path

import torch

from aotc._torch_compat import aoti_package_loader
from aotc.bundle.archives import check_compiled_package
from aotc.bundle.files import check_hash
from aotc.bundle.fingerprint import check_fingerprint
from aotc.contract.aliasing import StrideGuard
from aotc.contract.randomness import random_ops
from aotc.errors import AotcError, BundleError
from aotc.exporters import aoti_updates
from aotc.exporters.aoti_cache import compile_cached, compile_graph, compile_options
from aotc.exporters.aoti_frozen import (
    FREEZABLE,
    STATE,
    build_folded,
    build_frozen,
    folded_weights,
    folding_would_slow,
    updated_buffers,
)
from aotc.exporters.aoti_profiles import ProfiledGraph, narrows, parse_build, size_checks  # noqa: F401 (narrows: add_artifacts)
from aotc.exporters.formats import BuildOptions, Built, built_only
from aotc.exporters.weight_fold import FoldError
from aotc.runtime import heap
from aotc.runtime.cuda_graphs import CudaGraphRun

FORMAT = "aoti"
FILE_KIND = "compiled"
RANDOM_OPS = "random_ops"  # the build fingerprint's key for the ops a graph draws random numbers with


def artifact_path(kind: str, device: str) -> str:
    return f"compiled/{device}/{kind}.pt2"


def profile_path(kind: str, device: str, k: int) -> str:
    """The package of shape profile `k` (aotc.profiles), in the order compile was given them
    (its stem names the archive's folder, which holds letters, digits and '_' alone)."""
    return f"compiled/{device}/{kind}_p{k}.pt2"


def build(bundle, kind: str, device: torch.device, target: Path, options: BuildOptions) -> Built:
    """`_build`'s package, its fingerprint naming the random ops the graph draws ("none"
    when it draws none): a CUDA-graph replay refuses those (aotc.runtime.cuda_graphs), and
    the C++ runtime has no fx graph to look in."""
    built = _build(bundle, kind, device, target, options)
    drawn = random_ops(bundle.exported_program(kind).graph)
    return Built({**built.build, RANDOM_OPS: ",".join(drawn) or "none"}, built.cached)


def _build(bundle, kind: str, device: torch.device, target: Path, options: BuildOptions) -> Built:
    """Compile the bundle's `kind` graph for `device` (or reuse an identical earlier
    compile from options.cache_dir): a CPU inference graph folded unless options.fold is
    off or folding would slow it (folding_would_slow: small linears), or frozen where options.freeze asks; any other graph with its weights
    as inputs, a joint graph updating them in place (exporters/aoti_updates.py)."""
    cache = options.cache_dir if options.use_cache else None
    if options.freeze and kind in FREEZABLE:
        return build_frozen(bundle, kind, device, target, cache, options.profile)
    not_folded = None
    if options.fold and kind in FREEZABLE and device.type == "cpu":
        not_folded = updated_buffers(bundle, kind) or folding_would_slow(bundle, kind)
        if not not_folded:
            try:
                return build_folded(bundle, kind, device, target, cache, options.profile)
            except (FoldError, AotcError) as e:  # freezing this graph failed: weights stay inputs
                not_folded = str(e).strip().splitlines()[0][:300]
    configs = compile_options(device)
    updates = aoti_updates.plan(bundle, kind)  # new parameters, state and buffers written into their inputs

    def compile_fn(program, example_inputs, path):
        if updates is not None:
            program = aoti_updates.rewrite(program, updates, example_inputs)
        compile_graph(program, example_inputs, path, configs)

    key = {**configs, "updates": aoti_updates.IN_PLACE} if updates is not None else configs
    fingerprint, cached = compile_cached(bundle, kind, device, target, cache, compile_fn, key, options.profile)
    if updates is not None:
        fingerprint = {**fingerprint, "updates": aoti_updates.IN_PLACE}
    if not_folded:
        fingerprint = {**fingerprint, "weights": "inputs", "not_folded": not_folded}
    return Built(fingerprint, cached)


class CompiledGraph:
    """An AOTInductor package as a callable over flat tensors, returning a list.

    `layouts` (one StrideGuard or None per input) copies an input laid out unlike the
    compiled code expects into that layout; None where nothing needs checking."""

    def __init__(self, run, layouts: list | None = None, frozen: bool = False):
        self._run = run
        self.frozen = frozen  # its weights are folded in (see the module docstring)
        self._layouts = [(i, g) for i, g in enumerate(layouts or []) if g is not None]
        # for the runtime's fast path (aotc.runtime.fast_path): the bare runner, which
        # records no autograd history, and the layout each input must already have
        self.fast_call = run
        self.layouts = layouts

    def __call__(self, *args):
        if self._layouts:
            args = list(args)
            for i, guard in self._layouts:
                args[i] = guard.fit(args[i])
        return self._run(list(args))


def input_layouts(bundle, kind: str) -> list | None:
    """The layout the compiled `kind` graph expects of each user input (and synthetic
    base); parameters and buffers are the bundle's own, laid out as at compile."""

    meta = bundle.metadata.programs.get(kind)
    if meta is None:  # backward: saved activations come from the compiled forward
        return None
    return [
        StrideGuard.of(i.tensor.shape, i.tensor.stride, static=not i.tensor.dynamic_dims)
        if i.kind in ("user_input", "synthetic_base") and i.tensor is not None
        else None
        for i in meta.inputs
    ]


def load_graph(bundle, kind: str, device: torch.device, cuda_graphs=None,
               profiles: bool = True) -> CompiledGraph | ProfiledGraph:
    """The compiled graph: its package, or where it was compiled for shape profiles, each
    profile's package and the generic one if any, picked per call by the inputs' sizes
    (`profiles=False`: the generic package alone)."""
    profiled = sorted((f for f in bundle.manifest.files if f.kind == FILE_KIND and f.graph == kind
                       and f.device == device.type and f.path != artifact_path(kind, device.type)),
                      key=lambda f: int(f.path.removesuffix(".pt2").rsplit("_p", 1)[1]))
    if not profiles and profiled and bundle.manifest.file(artifact_path(kind, device.type)) is None:
        raise BundleError(f"Bundle '{bundle.path}' was compiled for shape profiles alone (--no-generic): its {kind} "
                          f"graph has no generic package to run with profiles=False.")
    if not profiled or not profiles:
        return _load_package(bundle, kind, device, artifact_path(kind, device.type), cuda_graphs)
    generic = bundle.manifest.file(artifact_path(kind, device.type))
    graphs = []
    for entry in profiled:
        label = (entry.build or {}).get("profile", "")
        checks = size_checks(bundle, kind, parse_build(label)) if kind != "backward" else None  # follows the forward
        graphs.append((label, checks, _load_package(bundle, kind, device, entry.path, cuda_graphs)))
    names = ", ".join(entry.build["profile"] for entry in profiled)
    refusal = (f"the sizes of this call lie in no shape profile of the {kind} graph of bundle '{bundle.path}' "
               f"({names}), which was compiled without the package for every size (--no-generic). Call it with "
               f"sizes in a profile, or compile it again with the generic package (aotc compile {bundle.path})")
    fallback = _load_package(bundle, kind, device, generic.path, cuda_graphs) if generic else None
    return ProfiledGraph(graphs, fallback, refusal)


def _load_package(bundle, kind: str, device: torch.device, rel: str, cuda_graphs=None) -> CompiledGraph:
    """One compiled package, loaded only after its archive members and hash check out.

    A compiled package is native code: it is hashed once more right before loading, and
    whatever the loader extracted is removed when the load fails (and when the graph is
    garbage collected). `cuda_graphs` (aotc.runtime.cuda_graphs.CudaGraphOptions): the
    package's runs are recorded as CUDA graphs and replayed."""

    entry = bundle.manifest.file(rel)
    if entry is None:
        have = sorted({f.device for f in bundle.manifest.files if f.kind == "compiled"})
        raise BundleError(
            f"Bundle '{bundle.path}' has no compiled {kind} graph for {device.type}"
            + (f"; it has compiled artifacts for {', '.join(have)}." if have else "; it has no compiled artifacts.")
            + f" Run: aotc compile {bundle.path} --device {device.type}"
        )
    check_fingerprint(entry.build, device, f"'{rel}' in bundle '{bundle.path}'")
    path = bundle.path / rel
    check_compiled_package(path)
    check_hash(bundle.path, entry)

    if device.type == "cpu":
        heap.keep()  # its buffers stay in the process between calls instead of faulting in anew
    index = device.index if device.index is not None else -1
    workdir = tempfile.mkdtemp(prefix="aotc-load-")
    try:
        loader = aoti_package_loader(str(path), index, workdir, single_threaded=cuda_graphs is not None)
        run = loader.boxed_run
    except Exception as e:
        shutil.rmtree(workdir, ignore_errors=True)
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise BundleError(f"'{path}' could not be loaded as an AOTInductor package ({type(e).__name__}: {first}).") from e
    build = entry.build or {}
    frozen = build.get("frozen") == "true"
    user = [i for i, s in enumerate(bundle.signature.graphs[kind].inputs) if s.role not in STATE]
    if cuda_graphs is not None:  # recorded around the package's own run, beneath the wrappers below
        roles = [s.role for s in bundle.signature.graphs[kind].inputs]
        if frozen or build.get("weights") == "folded":
            roles = [roles[i] for i in user]
        run = CudaGraphRun(run, roles, cuda_graphs, f"the {kind} graph of bundle '{bundle.path}'")
    if frozen:  # the package takes the user inputs alone; the runtime passes state first
        full = run

        def run(args, _full=full, _user=user):
            return _full([args[i] for i in _user])
    elif build.get("updates") == aoti_updates.IN_PLACE:
        updates = aoti_updates.plan(bundle, kind)
        if updates is None:
            raise BundleError(f"'{path}' was compiled to update its inputs in place, but the bundle's {kind} graph "
                              f"has nothing to update. Run: aotc compile {bundle.path} --force")
        run = aoti_updates.InPlaceRun(run, updates)
    elif build.get("weights") == "folded":
        try:
            weights = folded_weights(path, loader)
        except Exception:
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        full = run

        def run(args, _full=full, _user=user, _weights=weights):
            _weights.sync(args)
            return _full([args[i] for i in _user])

    graph = CompiledGraph(run, input_layouts(bundle, kind), frozen)
    weakref.finalize(graph, shutil.rmtree, workdir, True)
    return graph


def write(capture, writer) -> None:
    built_only(FORMAT)


def drawn_random(bundle, kind: str, device: torch.device) -> list[str]:
    """The random ops of the `kind` graph compiled for `device`: from the fingerprint, or
    for a package compiled before fingerprints named them, from the fx graph."""
    entry = bundle.manifest.file(artifact_path(kind, device.type))
    recorded = (entry.build or {}).get(RANDOM_OPS) if entry is not None else None
    if recorded is not None:
        return [] if recorded == "none" else recorded.split(",")
    return random_ops(bundle.exported_program(kind).graph)


def has_artifacts(bundle, device: torch.device) -> bool:
    """Whether every graph has a package for `device` (the generic one, or profiles' alone)."""
    have = {f.graph for f in bundle.manifest.files if f.kind == FILE_KIND and f.device == device.type}
    return set(bundle.graph_kinds) <= have
