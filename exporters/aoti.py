"""The `aoti` format: each graph compiled ahead of time by AOTInductor.

`compiled/<device>/<kind>.pt2` is an AOTInductor package. The graphs take parameters and
buffers as inputs, so a package holds code only: the weights stay in
weights.safetensors, stored once for every graph and device.

CPU inference graphs (inference, prefill, decode) are compiled by default with inductor's
freezing (constants folded, BatchNorm folded into convolutions, convolution and linear
weights prepacked for oneDNN), the package left without the constants: the weights are
folded again at load, and whenever they change, by the fold program the package
carries (exporters/weight_fold.py). Its build records `"weights": "folded"`. A graph
whose freezing cannot be recorded, or that updates its buffers, keeps its weights as
inputs (`"weights": "inputs"`, with the reason in `"not_folded"`); so does every graph
with `fold=False` (`aotc compile --no-fold`).

A frozen package (`aotc compile --freeze`) embeds the folded weights instead. It takes
the user inputs alone, holds its own copy of the weights, and cannot see new ones: the
runtime refuses weight changes on a module backed by one (FrozenWeightsError). Its
manifest entry's build records `"frozen": "true"`. What it still wins over the default:
no folding at load, and a package that runs without aotc.
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

from aotc import _torch_compat as tc
from aotc._torch_compat import aoti_package_loader
from aotc.bundle.archives import check_compiled_package, read_json_bytes
from aotc.bundle.files import check_hash
from aotc.bundle.fingerprint import check_fingerprint
from aotc.contract.aliasing import StrideGuard
from aotc.errors import AotcError, BundleError
from aotc.exporters.aoti_cache import compile_cached, package_problem
from aotc.exporters.formats import BuildOptions, Built, built_only
from aotc.exporters.weight_fold import FOLD_MEMBER, FOLD_VERSION, FoldedWeights, FoldError, FoldRecorder, read_from, write_into

FORMAT = "aoti"
FILE_KIND = "compiled"

# Inductor options that shape the artifact; part of the compile cache key.
# fallback_random: random ops (dropout) call eager's kernels, so under the same seed a
# compiled bundle draws the same masks as eager instead of inductor's own RNG stream.
COMPILE_OPTIONS: dict[str, object] = {"fallback_random": True}
FROZEN_OPTIONS: dict[str, object] = {**COMPILE_OPTIONS, "freezing": True}
# Frozen code, the constants left out of the package: the runtime folds the weights in.
# The code must not depend on the weights' values, so the two value-dependent shortcuts are
# off: small constants inlined into the code as literals (always_keep_tensor_constants),
# constants of one repeated value rebuilt with full() (joint_graph_constant_folding).
FOLDED_OPTIONS: dict[str, object] = {**FROZEN_OPTIONS, "aot_inductor.package_constants_in_so": False,
                                     "always_keep_tensor_constants": True, "joint_graph_constant_folding": False}
FREEZABLE = ("inference", "prefill", "decode")  # graphs that never train their weights
_STATE = ("parameter", "buffer", "constant")


def artifact_path(kind: str, device: str) -> str:
    return f"compiled/{device}/{kind}.pt2"


def build(bundle, kind: str, device: torch.device, target: Path, options: BuildOptions) -> Built:
    """Compile the bundle's `kind` graph for `device` (or reuse an identical earlier
    compile from options.cache_dir); frozen where options.freeze asks and the graph can be."""
    cache = options.cache_dir if options.use_cache else None
    if options.freeze and kind in FREEZABLE:
        return build_frozen(bundle, kind, device, target, cache)
    not_folded = None
    if options.fold and kind in FREEZABLE and device.type == "cpu":
        not_folded = updated_buffers(bundle, kind)
        if not not_folded:
            try:
                return build_folded(bundle, kind, device, target, cache)
            except (FoldError, AotcError) as e:  # freezing this graph failed: weights stay inputs
                not_folded = str(e).strip().splitlines()[0][:300]
    fingerprint, cached = compile_cached(bundle, kind, device, target, cache, compile_graph, COMPILE_OPTIONS)
    if not_folded:
        fingerprint = {**fingerprint, "weights": "inputs", "not_folded": not_folded}
    return Built(fingerprint, cached)


def build_folded(bundle, kind: str, device: torch.device, target: Path, cache: Path | None) -> Built:
    """The graph compiled frozen, without its constants, and the fold program that makes
    them from the weights written into the package; the compile is checked by running
    the program on the bundle's weights, which must give the constants freezing made."""
    signature = bundle.signature.graphs[kind]

    def compile_folded(program, example_inputs: list, package_path: Path) -> None:
        state = {f"state_{k}": i for k, i in enumerate(i for i, s in enumerate(signature.inputs) if s.role in _STATE)}
        recorder = FoldRecorder(state, example_inputs)
        with torch.no_grad(), tc.record_constant_folding(recorder):  # see compile_frozen on no_grad
            compile_graph(frozen_program(program, signature, example_inputs), _user(signature, example_inputs),
                          package_path, FOLDED_OPTIONS)
        names = constant_names(package_path)
        fold = recorder.program(names)
        recorder.check(fold, example_inputs)
        check_other_weights(program, fold, package_path, example_inputs, signature)
        write_into(package_path, fold)

    key_options = {**FOLDED_OPTIONS, "fold_format": FOLD_VERSION}
    fingerprint, cached = compile_cached(bundle, kind, device, target, cache, compile_folded, key_options)
    return Built({**fingerprint, "weights": "folded", "prepacked": str(prepacked_calls(target))}, cached)


def check_other_weights(program, fold, package: Path, example_inputs: list, signature) -> None:
    """The folded package, given other weights, gives the graph's results for them: the
    evidence that nothing in the compiled code depends on the weights' values (FoldError
    otherwise, and the graph keeps its weights as inputs)."""
    g = torch.Generator().manual_seed(0)
    inputs = list(example_inputs)
    for i, s in enumerate(signature.inputs):
        t = inputs[i]
        if s.role in _STATE and isinstance(t, torch.Tensor) and t.is_floating_point():
            # new values of the same sign (a variance stays positive), none uniform or zero
            scale = float(t.detach().abs().mean()) or 1.0
            noise = torch.rand(t.shape, generator=g, dtype=t.dtype)
            inputs[i] = t.detach() * (0.75 + 0.5 * noise) + 0.1 * scale * torch.rand(t.shape, generator=g, dtype=t.dtype)
    with torch.no_grad():
        want = program.module()(*inputs)
        workdir = tempfile.mkdtemp(prefix="aotc-load-")
        try:
            loader = aoti_package_loader(str(package), -1, workdir)
            folded = FoldedWeights(fold, loader, "the recorded fold program")
            folded.sync(inputs)
            got = loader.boxed_run(_user(signature, inputs))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    want = [w for w in torch.utils._pytree.tree_leaves(want)]
    for k, (w, o) in enumerate(zip(want, got)):
        if isinstance(w, torch.Tensor) and w.is_floating_point():
            tolerance = 1e-3 * (float(w.abs().max()) if w.numel() else 0.0) + 1e-5
            if w.shape != o.shape or not torch.allclose(o, w, rtol=1e-3, atol=tolerance, equal_nan=True):
                raise FoldError(f"compiled frozen, output {k} depends on the weights' values at compile time")


def constant_names(package: Path) -> list[str]:
    """The constants an AOTInductor package expects to be given (by their FQNs)."""
    workdir = tempfile.mkdtemp(prefix="aotc-load-")
    try:
        return list(aoti_package_loader(str(package), -1, workdir).get_constant_fqns())
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def build_frozen(bundle, kind: str, device: torch.device, target: Path, cache: Path | None) -> Built:
    """The graph compiled with its weights embedded (aotc compile --freeze)."""
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


def updated_buffers(bundle, kind: str) -> str | None:
    """Why the graph's weights cannot be folded, if it updates buffers (BatchNorm statistics
    in a train-mode capture): it needs them as inputs, or the update would be lost."""
    updated = [i.name for i in bundle.metadata.programs[kind].inputs if i.kind == "buffer" and i.mutates_data]
    return f"the graph updates buffers ({', '.join(updated)})" if updated else None


def check_freezable(bundle, kind: str) -> None:
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
        loader = aoti_package_loader(str(path), index, workdir)
        run = loader.boxed_run
    except Exception as e:
        shutil.rmtree(workdir, ignore_errors=True)
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise BundleError(f"'{path}' could not be loaded as an AOTInductor package ({type(e).__name__}: {first}).") from e
    build = entry.build or {}
    frozen = build.get("frozen") == "true"
    user = [i for i, s in enumerate(bundle.signature.graphs[kind].inputs) if s.role not in _STATE]
    if frozen:  # the package takes the user inputs alone; the runtime passes state first
        full = run

        def run(args, _full=full, _user=user):
            return _full([args[i] for i in _user])
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


def folded_weights(path: Path, loader) -> FoldedWeights:
    """The fold program of a package compiled without its constants, checked to make
    exactly the constants the package expects."""
    where = f"'{path}' ({FOLD_MEMBER})"
    program = read_from(path, read_json_bytes)
    if program is None:
        raise BundleError(f"'{path}' was compiled without its weights but has no {FOLD_MEMBER} to fold them; "
                          "compile the bundle again.")
    expected = set(loader.get_constant_fqns())
    if set(program.constants) != expected:
        missing = sorted(expected - set(program.constants))[:3]
        raise BundleError(f"{where} does not make the constants the package expects"
                          + (f" (missing {', '.join(missing)})" if missing else "") + "; compile the bundle again.")
    return FoldedWeights(program, loader, where)


def write(capture, writer) -> None:
    built_only(FORMAT)


def has_artifacts(bundle, device: torch.device) -> bool:
    return all(bundle.manifest.file(artifact_path(k, device.type)) is not None for k in bundle.graph_kinds)
