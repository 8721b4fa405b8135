"""The `aoti` format: each graph compiled ahead of time by AOTInductor.

`compiled/<device>/<kind>.pt2` is an AOTInductor package. The graphs take parameters and
buffers as inputs, so a package holds code only: the weights stay in
weights.safetensors, stored once for every graph and device.

A frozen package (`aotc compile --freeze`, inference graphs only) is compiled with the
weights folded in (inductor's freezing: constants folded, CPU convolution and linear
weights prepacked for oneDNN). It takes the user inputs alone, holds its own copy of the
weights, and cannot see new ones: the runtime refuses weight changes on a module backed
by one (FrozenWeightsError). Its manifest entry's build records `"frozen": "true"`.
"""

from __future__ import annotations

import re
import shutil
import tempfile
import weakref
import zipfile
from pathlib import Path

import torch
from torch.export import Dim

from aotc._torch_compat import aoti_package_loader
from aotc.bundle.archives import check_compiled_package
from aotc.bundle.files import check_hash
from aotc.bundle.fingerprint import check_fingerprint
from aotc.contract.aliasing import StrideGuard
from aotc.errors import AotcError, BundleError
from aotc.exporters.aoti_cache import compile_cached, package_problem
from aotc.exporters.formats import BuildOptions, Built, built_only

FORMAT = "aoti"
FILE_KIND = "compiled"

# Inductor options that shape the artifact; part of the compile cache key.
# fallback_random: random ops (dropout) call eager's kernels, so under the same seed a
# compiled bundle draws the same masks as eager instead of inductor's own RNG stream.
COMPILE_OPTIONS: dict[str, object] = {"fallback_random": True}
FROZEN_OPTIONS: dict[str, object] = {**COMPILE_OPTIONS, "freezing": True}
FREEZABLE = ("inference", "prefill", "decode")  # graphs that never train their weights
_STATE = ("parameter", "buffer", "constant")


def artifact_path(kind: str, device: str) -> str:
    return f"compiled/{device}/{kind}.pt2"


def build(bundle, kind: str, device: torch.device, target: Path, options: BuildOptions) -> Built:
    """Compile the bundle's `kind` graph for `device` (or reuse an identical earlier
    compile from options.cache_dir); frozen where options.freeze asks and the graph can be."""
    cache = options.cache_dir if options.use_cache else None
    if not (options.freeze and kind in FREEZABLE):
        fingerprint, cached = compile_cached(bundle, kind, device, target, cache, compile_graph, COMPILE_OPTIONS)
        return Built(fingerprint, cached)
    check_freezable(bundle, kind)
    signature = bundle.signature.graphs[kind]

    def compile_frozen(program, example_inputs: list, package_path: Path) -> None:
        # inductor applies freezing only with grad mode off (compile_fx checks
        # torch.is_grad_enabled()); under grad mode it would fold nothing, silently
        with torch.no_grad():
            compile_graph(frozen_program(program, signature, example_inputs), _user(signature, example_inputs),
                          package_path, FROZEN_OPTIONS)

    # the package holds the weights: a cached one is reused only for the same weights
    weights = [f.sha256 for f in bundle.manifest.files if f.kind == "weights"]
    key_options = {**FROZEN_OPTIONS, "weights": weights}
    fingerprint, cached = compile_cached(bundle, kind, device, target, cache, compile_frozen, key_options)
    return Built({**fingerprint, "frozen": "true", "prepacked": str(prepacked_calls(target))}, cached)


def prepacked_calls(package: Path) -> int:
    """How many calls in a compiled package's code run on weights freezing prepacked for
    oneDNN (convolutions, linears): the evidence that freezing did its work on CPU."""

    with zipfile.ZipFile(package) as archive:
        code = "".join(archive.read(n).decode(errors="replace") for n in archive.namelist() if n.endswith("wrapper.cpp"))
    return len(re.findall(r"aoti_torch_cpu_(?:mkldnn_\w+|_linear_pointwise\w*|mkl_linear)\(", code))


def check_freezable(bundle, kind: str) -> None:
    """A graph that updates its buffers (BatchNorm statistics in a train-mode capture) needs
    them as inputs: folded into the code, the update would be lost."""
    updated = [i.name for i in bundle.metadata.programs[kind].inputs if i.kind == "buffer" and i.mutates_data]
    if updated:
        raise AotcError(
            f"the {kind} graph of '{bundle.path}' updates buffers ({', '.join(updated)}), which freezing would fold "
            "into the compiled code and never update. Compile it without --freeze."
        )


def _user(signature, values: list) -> list:
    """The values of the graph inputs that are not the bundle's state."""
    return [v for s, v in zip(signature.inputs, values) if s.role not in _STATE]


def frozen_program(program, signature, example_inputs: list):
    """`program` (a flat graph over state and user inputs) exported again with its
    parameters, buffers and constants as the program's own state, so that inductor's
    freezing can fold them; the result takes the user inputs only."""

    graph = program.module()
    state = [(i, v) for i, (s, v) in enumerate(zip(signature.inputs, example_inputs)) if s.role in _STATE]
    user = [i for i, s in enumerate(signature.inputs) if s.role not in _STATE]

    class Frozen(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.graph = graph
            for k, (_, value) in enumerate(state):
                self.register_buffer(f"state_{k}", value)

        def forward(self, *inputs):
            args = [None] * (len(state) + len(user))
            for k, (i, _) in enumerate(state):
                args[i] = getattr(self, f"state_{k}")
            for i, value in zip(user, inputs):
                args[i] = value
            return self.graph(*args)

    placeholders = list(program.graph.find_nodes(op="placeholder"))
    specs = []
    for i in user:
        val = placeholders[i].meta.get("val")
        dims = {d: Dim.AUTO for d, n in enumerate(getattr(val, "shape", ())) if isinstance(n, torch.SymInt)
                and not n.node.expr.is_number}
        specs.append(dims or None)
    dynamic = (tuple(specs),) if any(specs) else None
    return torch.export.export(Frozen(), tuple(example_inputs[i] for i in user), dynamic_shapes=dynamic, strict=False)


def _copy_views_of_inputs(program) -> None:
    """Make every output that is a view of a graph input (not the input itself) a copy.

    AOTInductor in torch 2.13 can return such a view with the input's own strides when
    the input is returned too (e.g. a backward graph returning `tangent` and
    `tangent.t()`): a silently wrong gradient. A copy in the view's layout has the right
    values; the runtime rebuilds real views of inputs from the metadata anyway."""
    graph = program.graph_module.graph
    output = graph.find_nodes(op="output")[0]
    placeholders = set(graph.find_nodes(op="placeholder"))

    def views_an_input(node) -> bool:
        while isinstance(node, torch.fx.Node) and node not in placeholders:
            target = node.target
            if not (isinstance(target, torch._ops.OpOverload) and target.is_view):
                return False
            node = node.args[0]
        return isinstance(node, torch.fx.Node)

    copies = {}
    for node in output.all_input_nodes:
        if node not in placeholders and views_an_input(node):
            with graph.inserting_before(output):
                copy = graph.call_function(torch.ops.aten.clone.default, (node,))
            copy.meta["val"] = node.meta["val"].clone()
            copies[node] = copy
    if copies:
        output.args = torch.fx.map_arg(output.args, lambda n: copies.get(n, n))
        program.graph_module.recompile()


def compile_graph(program, example_inputs: list, package_path: Path, configs: dict = COMPILE_OPTIONS) -> None:
    """AOTInductor-compile `program` (an ExportedProgram) for the device of its inputs.

    A package whose metadata does not read back (inductor's shared cache can hand out a
    file another process is still writing) is compiled once more with inductor's caches
    off; a second bad package is an error, never a bundle.
    """
    from torch._inductor import aoti_compile_and_package  # inductor: imported only to compile

    _copy_views_of_inputs(program)
    program.example_inputs = (tuple(example_inputs), {})
    try:
        for attempt in range(2):
            with torch._inductor.config.patch(force_disable_caches=attempt > 0):
                aoti_compile_and_package(program, package_path=str(package_path), inductor_configs=dict(configs))
            problem = package_problem(package_path)
            if problem is None:
                return
        raise AotcError(f"AOTInductor wrote a package that does not read back ({problem}); compile again.")
    except AotcError:
        raise
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        hint = ""
        if "while_loop_stack_output" in first:  # torch 2.13: AOTInductor has no C++ for while_loop's saved steps
            hint = (" torch's AOTInductor cannot compile a while_loop that is differentiated (its forward saves "
                    "every iteration); this bundle runs on the fx backend (aotc.load(..., backend='fx')), or "
                    "export an inference graph to compile.")
        raise AotcError(f"AOTInductor could not compile the graph: {type(e).__name__}: {first}.{hint}") from e
    finally:
        program.example_inputs = None


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


def load_graph(bundle, kind: str, device: torch.device) -> CompiledGraph:
    """The compiled graph, loaded only after its archive members and hash check out.

    A compiled package is native code: it is hashed once more right before loading, and
    whatever the loader extracted is removed when the load fails (and when the graph is
    garbage collected)."""

    rel = artifact_path(kind, device.type)
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

    index = device.index if device.index is not None else -1
    workdir = tempfile.mkdtemp(prefix="aotc-load-")
    try:
        run = aoti_package_loader(str(path), index, workdir).boxed_run
    except Exception as e:
        shutil.rmtree(workdir, ignore_errors=True)
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise BundleError(f"'{path}' could not be loaded as an AOTInductor package ({type(e).__name__}: {first}).") from e
    frozen = (entry.build or {}).get("frozen") == "true"
    if frozen:  # the package takes the user inputs alone; the runtime passes state first
        user = [i for i, s in enumerate(bundle.signature.graphs[kind].inputs) if s.role not in _STATE]
        full = run

        def run(args, _full=full, _user=user):
            return _full([args[i] for i in _user])

    graph = CompiledGraph(run, input_layouts(bundle, kind), frozen)
    weakref.finalize(graph, shutil.rmtree, workdir, True)
    return graph


def write(capture, writer) -> None:
    built_only(FORMAT)


def has_artifacts(bundle, device: torch.device) -> bool:
    return all(bundle.manifest.file(artifact_path(k, device.type)) is not None for k in bundle.graph_kinds)
