"""Inference graphs compiled with inductor's freezing, two ways.

Freezing folds constants (BatchNorm into the convolution before it, transposes, casts)
and prepacks CPU convolution and linear weights for oneDNN; it makes CPU inference fast.

- **Folded** (the default for CPU inference graphs): compiled frozen, the package left
  without its constants. While inductor freezes, a FoldRecorder records how it computed
  each constant from the weights (exporters/weight_fold.py); the program goes into the
  package, and the runtime runs it at load and whenever the weights change. The build
  records `"weights": "folded"`. A graph whose freezing cannot be recorded or checked, or
  that updates its buffers, keeps its weights as inputs instead (`"weights": "inputs"`,
  the reason in `"not_folded"`).
- **Frozen** (`aotc compile --freeze`): the folded weights embedded in the package, which
  then takes the user inputs alone, holds its own copy of the weights, and cannot see new
  ones: the runtime refuses weight changes (FrozenWeightsError). The build records
  `"frozen": "true"`. What it still wins over the default: no folding at load, and a
  package that torch's own loader runs without aotc.
"""

from __future__ import annotations

import contextlib
import platform
import re
import shutil
import tempfile
import zipfile
from pathlib import Path

import torch
from torch.export import Dim

from aotc import _torch_compat as tc
from aotc._torch_compat import aoti_package_loader
from aotc.bundle.archives import read_json_bytes
from aotc.errors import AotcError, BundleError
from aotc.exporters.aoti_cache import COMPILE_OPTIONS, compile_cached, compile_graph
from aotc.exporters.formats import Built
from aotc.exporters.weight_fold import (
    FOLD_MEMBER,
    FOLD_VERSION,
    FoldedWeights,
    FoldError,
    FoldRecorder,
    read_from,
    write_into,
)

FROZEN_OPTIONS: dict[str, object] = {**COMPILE_OPTIONS, "freezing": True}
# Frozen code, the constants left out of the package: the runtime folds the weights in.
# The code must not depend on the weights' values, so the two value-dependent shortcuts are
# off: small constants inlined into the code as literals (always_keep_tensor_constants),
# constants of one repeated value rebuilt with full() (joint_graph_constant_folding).
FOLDED_OPTIONS: dict[str, object] = {**FROZEN_OPTIONS, "aot_inductor.package_constants_in_so": False,
                                     "always_keep_tensor_constants": True, "joint_graph_constant_folding": False}
FREEZABLE = ("inference", "prefill", "decode")  # graphs that never train their weights
STATE = ("parameter", "buffer", "constant")


def build_folded(bundle, kind: str, device: torch.device, target: Path, cache: Path | None,
                 profile=None) -> Built:
    """The graph compiled frozen, without its constants, and the fold program that makes
    them from the weights written into the package; the compile is checked by running
    the program on the bundle's weights, which must give the constants freezing made."""
    signature = bundle.signature.graphs[kind]
    fuse = linear_post_ops_pay()

    def compile_folded(program, example_inputs: list, package_path: Path) -> None:
        state = {f"state_{k}": i for k, i in enumerate(i for i, s in enumerate(signature.inputs) if s.role in STATE)}
        recorder = FoldRecorder(state, example_inputs)
        # no_grad: see compile_frozen
        with torch.no_grad(), tc.record_constant_folding(recorder), _linear_post_ops(fuse):
            compile_graph(frozen_program(program, signature, example_inputs), _user(signature, example_inputs),
                          package_path, FOLDED_OPTIONS)
        names = constant_names(package_path)
        fold = recorder.program(names)
        recorder.check(fold, example_inputs)
        check_other_weights(program, fold, package_path, example_inputs, signature)
        write_into(package_path, fold)

    key_options = {**FOLDED_OPTIONS, "fold_format": FOLD_VERSION, "linear_post_ops": "fused" if fuse else "unfused"}
    fingerprint, cached = compile_cached(bundle, kind, device, target, cache, compile_folded, key_options, profile)
    return Built({**fingerprint, "weights": "folded", "prepacked": str(prepacked_calls(target))}, cached)


def check_other_weights(program, fold, package: Path, example_inputs: list, signature) -> None:
    """The folded package, given other weights, gives the graph's results for them: the
    evidence that nothing in the compiled code depends on the weights' values (FoldError
    otherwise, and the graph keeps its weights as inputs)."""
    g = torch.Generator().manual_seed(0)
    inputs = list(example_inputs)
    for i, s in enumerate(signature.inputs):
        t = inputs[i]
        if s.role in STATE and isinstance(t, torch.Tensor) and t.is_floating_point():
            # new values of the same sign (a variance stays positive), none uniform or zero
            scale = float(t.detach().abs().mean()) or 1.0
            noise = torch.rand(t.shape, generator=g, dtype=t.dtype)
            inputs[i] = t.detach() * (0.75 + 0.5 * noise) + 0.1 * scale * torch.rand(t.shape, generator=g, dtype=t.dtype)
    def fresh(values: list) -> list:  # the graph may mutate its inputs: each run gets its own
        return [v.clone() if isinstance(v, torch.Tensor) else v for v in values]

    with torch.no_grad():
        want = tc.pytree.tree_leaves(program.module()(*fresh(inputs)))
        workdir = tempfile.mkdtemp(prefix="aotc-load-")
        try:
            loader = aoti_package_loader(str(package), -1, workdir)
            folded = FoldedWeights(fold, loader, "the recorded fold program")
            folded.sync(inputs)
            got = loader.boxed_run(_user(signature, fresh(inputs)))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    if len(want) != len(got):
        raise FoldError(f"compiled frozen, the graph returns {len(got)} outputs, not {len(want)}")
    for k, (w, o) in enumerate(zip(want, got)):
        if isinstance(w, torch.Tensor) and w.is_floating_point():
            # scaled by the largest finite value: a NaN or inf output (matched as equal_nan
            # and equal infinities do) made the atol NaN, and allclose raised
            finite = w[w.isfinite()]
            tolerance = 1e-3 * (float(finite.abs().max()) if finite.numel() else 0.0) + 1e-5
            if w.shape != o.shape or not torch.allclose(o, w, rtol=1e-3, atol=tolerance, equal_nan=True):
                raise FoldError(f"compiled frozen, output {k} depends on the weights' values at compile time")


def constant_names(package: Path) -> list[str]:
    """The constants an AOTInductor package expects to be given (by their FQNs)."""
    workdir = tempfile.mkdtemp(prefix="aotc-load-")
    try:
        return list(aoti_package_loader(str(package), -1, workdir).get_constant_fqns())
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def build_frozen(bundle, kind: str, device: torch.device, target: Path, cache: Path | None,
                 profile=None) -> Built:
    """The graph compiled with its weights embedded (aotc compile --freeze)."""
    check_freezable(bundle, kind)
    signature = bundle.signature.graphs[kind]
    fuse = linear_post_ops_pay()

    def compile_frozen(program, example_inputs: list, package_path: Path) -> None:
        # inductor applies freezing only with grad mode off (compile_fx checks
        # torch.is_grad_enabled()); under grad mode it would fold nothing, silently
        with torch.no_grad(), _linear_post_ops(fuse):
            compile_graph(frozen_program(program, signature, example_inputs), _user(signature, example_inputs),
                          package_path, FROZEN_OPTIONS)

    # the package holds the weights: a cached one is reused only for the same weights
    weights = [f.sha256 for f in bundle.manifest.files if f.kind == "weights"]
    key_options = {**FROZEN_OPTIONS, "weights": weights, "linear_post_ops": "fused" if fuse else "unfused"}
    fingerprint, cached = compile_cached(bundle, kind, device, target, cache, compile_frozen, key_options, profile)
    return Built({**fingerprint, "frozen": "true", "prepacked": str(prepacked_calls(target))}, cached)


def linear_post_ops_pay() -> bool:
    """Whether oneDNN does the pointwise op after a prepacked linear (a residual add, GELU,
    SiLU, tanh) faster as the linear's post-op than a generated kernel does it after. On an
    x86 CPU without AVX-512 it does not: on an AVX2-only AMD EPYC, at the suite's text and
    vision layers, a linear with its bias and a residual add as post-op took 1.4x to 5x the
    time of the linear and a separate add, with GELU or SiLU 1.1x to 1.25x
    (benchmarks/linear_post_ops.md). With AVX-512 they stay fused, as inductor fuses them."""
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    return not x86 or torch.backends.cpu.get_cpu_capability().startswith("AVX512")


def _linear_post_ops(fuse: bool):
    return contextlib.nullcontext() if fuse else tc.linear_post_ops_unfused()


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


# Under this many multiply-adds a call, a linear layer runs faster as aten's addmm on its
# weight than as the oneDNN prepacked linear freezing makes of it, whose call costs ~9 µs
# more: folded, the mlp sample took 31 µs a call against 10 µs with its weights as inputs,
# tiny_transformer 99 µs against 34 µs; BERT (50M multiply-adds a linear) 73 ms against 84.
SMALL_LINEAR_MACS = 4_000_000
_LINEAR = {"aten.linear.default": (0, 1, True), "aten.addmm.default": (1, 2, False), "aten.mm.default": (0, 1, False)}


def _layers(bundle, kind: str) -> tuple[bool, int | None]:
    """Whether the graph has a convolution, and the multiply-adds of its largest linear layer
    at the bundle's example sizes (0 with none; None where a size is unknown)."""
    graph = bundle.exported_program(kind).graph
    sizes = {}  # each size symbol of the graph's inputs, at the example's size
    for node, info in zip(graph.find_nodes(op="placeholder"), bundle.metadata.programs[kind].inputs):
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor) and info.tensor is not None:
            for n, example in zip(val.shape, info.tensor.shape):
                if isinstance(n, torch.SymInt) and n.node.expr.is_Symbol:
                    sizes[n.node.expr] = example

    def size(n) -> int | None:
        if isinstance(n, torch.SymInt):
            value = n.node.expr.subs(sizes)
            return int(value) if value.is_number else None
        return int(n)

    conv, largest = False, 0
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        target = str(node.target)
        conv = conv or target.startswith(("aten.conv", "aten._conv", "aten.mkldnn_conv"))
        if target in _LINEAR and largest is not None:
            x_at, w_at, transposed = _LINEAR[target]
            x, w = node.args[x_at].meta.get("val"), node.args[w_at].meta.get("val")
            dims = [size(n) for n in (*x.shape, *w.shape)] if x is not None and w is not None else [None]
            if None in dims:
                largest = None
                continue
            rows = 1
            for n in dims[:x.dim() - 1]:
                rows *= n
            k, n = (dims[-1], dims[-2]) if transposed else (dims[-2], dims[-1])
            largest = max(largest, rows * k * n)
    return conv, largest


def folding_would_slow(bundle, kind: str) -> str | None:
    """Why folding would slow the graph down, or None: a graph with no convolution whose
    every linear layer takes under SMALL_LINEAR_MACS at the bundle's example sizes."""
    conv, largest = _layers(bundle, kind)
    if conv or largest == 0:  # prepacked convolutions win by milliseconds (resnet18: 23 ms against 25)
        return None
    if largest is not None and largest < SMALL_LINEAR_MACS:
        return (f"its largest linear layer takes {largest:,} multiply-adds at the example sizes, under "
                f"{SMALL_LINEAR_MACS:,}: oneDNN's prepacked call would cost more than it saves")
    return None


def check_freezable(bundle, kind: str) -> None:
    updated = [i.name for i in bundle.metadata.programs[kind].inputs if i.kind == "buffer" and i.mutates_data]
    if updated:
        raise AotcError(
            f"the {kind} graph of '{bundle.path}' updates buffers ({', '.join(updated)}), which freezing would fold "
            "into the compiled code and never update. Compile it without --freeze."
        )


def _user(signature, values: list) -> list:
    """The values of the graph inputs that are not the bundle's state."""
    return [v for s, v in zip(signature.inputs, values) if s.role not in STATE]


def frozen_program(program, signature, example_inputs: list):
    """`program` (a flat graph over state and user inputs) exported again with its
    parameters, buffers and constants as the program's own state, so that inductor's
    freezing can fold them; the result takes the user inputs only."""

    graph = program.module()
    state = [(i, v) for i, (s, v) in enumerate(zip(signature.inputs, example_inputs)) if s.role in STATE]
    user = [i for i, s in enumerate(signature.inputs) if s.role not in STATE]

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
