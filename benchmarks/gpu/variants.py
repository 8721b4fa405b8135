"""Each variant of a row as a callable over the row's inputs.

Inference: `build(name, row)` returns a `Variant` (the call, and what its outputs' tensors
are). Training: `build_step(name, row)` returns a step that runs forward, loss, backward
and the optimizer's update, with the parameters it updates. A variant that cannot run
here raises `NotRun` with the reason; any other exception is the variant failing.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks.gpu.measure import tensor_leaves

INFERENCE = ("eager", "compile", "compile-max-autotune", "compile-reduce-overhead", "raw", "aotc",
             "aotc-cuda-graphs")
TRAINING = ("eager-fused", "compile-step", "aotc-fused", "aotc-fused-cuda-graphs")
LABELS = {
    "eager": "eager",
    "compile": "torch.compile",
    "compile-max-autotune": "torch.compile max-autotune-no-cudagraphs",
    "compile-reduce-overhead": "torch.compile reduce-overhead",
    "raw": "AOTInductor raw runner",
    "aotc": "aotc",
    "aotc-cuda-graphs": "aotc + CUDA graphs",
    "eager-fused": "eager, fused optimizer",
    "compile-step": "torch.compile whole step",
    "aotc-fused": "aotc joint + optimizer",
    "aotc-fused-cuda-graphs": "aotc joint + optimizer, CUDA graphs",
}
COMPILE_MODES = {"compile": None, "compile-max-autotune": "max-autotune-no-cudagraphs",
                 "compile-reduce-overhead": "reduce-overhead"}
NEEDS_BUNDLE = ("raw", "aotc", "aotc-cuda-graphs")


class NotRun(Exception):
    """A variant this run cannot make: no CUDA device for CUDA graphs, an aotc without
    the keyword, a bundle that could not be built. The message is the reason."""


@dataclass
class RowInputs:
    """What every variant of an inference row shares: the eager model on the device, the
    timed inputs (on the device), and the bundle when one was built."""

    model: torch.nn.Module
    args: tuple
    kwargs: dict
    device: torch.device
    bundle: Path | None


@dataclass
class Variant:
    """One variant ready to call: `call()` runs it once on the row's inputs; `leaves(out)`
    lists the tensors of what it returned, in the eager output's order; `setup_s` is what
    making it cost before its first call (aotc.load), None when nothing."""

    call: Callable[[], object]
    leaves: Callable[[object], list[torch.Tensor]] = tensor_leaves
    setup_s: float | None = None


def build(name: str, row: RowInputs) -> Variant:
    if name in NEEDS_BUNDLE and row.bundle is None:
        raise NotRun("no aotc bundle (its export or compile failed; see the row's bundle)")
    if name == "eager":
        return _model_call(row.model, row)
    if name in COMPILE_MODES:
        if name == "compile-reduce-overhead" and row.device.type != "cuda":
            raise NotRun("CUDA graphs need a CUDA device")
        return _model_call(torch.compile(row.model, mode=COMPILE_MODES[name]), row)
    if name == "aotc":
        return _aotc(row)
    if name == "aotc-cuda-graphs":
        if row.device.type != "cuda":
            raise NotRun("CUDA graphs need a CUDA device")
        return _aotc(row, cuda_graphs=True)
    if name == "raw":
        return raw_runner(row.bundle, row.device, row.args, row.kwargs)
    raise ValueError(f"unknown variant {name!r}")


def _model_call(model, row: RowInputs) -> Variant:
    args, kwargs = row.args, row.kwargs
    return Variant(lambda: model(*args, **kwargs))


def _aotc(row: RowInputs, **keywords) -> Variant:
    import aotc
    from aotc import errors

    refused = getattr(errors, "CudaGraphError", ())  # aotc's named refusal of a recording
    start = time.perf_counter()
    try:
        loaded = aotc.load(row.bundle, backend="aoti", device=row.device, **keywords)
    except refused as e:
        raise NotRun(f"aotc refuses CUDA graphs for this bundle: {e}") from e
    except TypeError as e:
        if not keywords or not any(k in str(e) for k in keywords):
            raise
        raise NotRun(f"TypeError: {e}") from e  # an aotc that does not take the keyword yet
    setup = time.perf_counter() - start
    return Variant(lambda: loaded(*row.args, **row.kwargs), setup_s=setup)


def raw_runner(bundle_path: Path, device: torch.device, args: tuple, kwargs: dict) -> Variant:
    """The bundle's compiled inference package called bare on flat tensors gathered once:
    the bundle's weights and the row's own inputs, as aotc.tools.bench_raw does with
    random ones. No aotc code runs per call."""
    from aotc._torch_compat import aoti_package_loader
    from aotc.bundle.files import Bundle
    from aotc.bundle.signing import require_signature
    from aotc.exporters import formats
    from aotc.exporters.graph_inputs import example_graph_inputs

    require_signature(bundle_path, None)  # the package is native code: as aotc.load would
    start = time.perf_counter()
    bundle = Bundle.open(bundle_path, verify_hashes=False)
    aoti, kind = formats.get("aoti"), "inference"
    artifact = aoti.artifact_path(kind, device.type)
    index = device.index if device.index is not None else -1
    workdir = tempfile.mkdtemp(prefix="aotc-bench-")
    atexit.register(shutil.rmtree, workdir, True)  # the package runs until this process exits
    package = aoti_package_loader(str(bundle.path / artifact), index, workdir)
    sig = bundle.signature.graphs[kind]
    flat = example_graph_inputs(bundle, kind, device)
    user = user_flat(bundle, args, kwargs)
    for i, slot in enumerate(sig.inputs):
        if slot.role == "user_input":
            flat[i] = user[slot.index]
        elif slot.role == "synthetic_base":
            raise NotRun("the bundle has aliased inputs (a synthetic base); the raw runner does not rebuild them")
    build = bundle.manifest.file(artifact).build or {}
    folded = None
    if build.get("weights") == "folded":  # the weights folded once, as aotc.load does
        folded = aoti.folded_weights(bundle.path / artifact, package)
        folded.sync(flat)
    if build.get("frozen") == "true" or build.get("weights") == "folded":  # the package takes user inputs alone
        flat = [v for s, v in zip(sig.inputs, flat) if s.role not in ("parameter", "buffer", "constant")]
    outputs = sorted((s.index, i) for i, s in enumerate(sig.outputs) if s.role == "user_output")
    run = package.run

    def call(_folded=folded):  # keeps the folded weights alive while the package uses them
        return run(flat)

    return Variant(call, leaves=lambda outs: [outs[i] for _, i in outputs], setup_s=time.perf_counter() - start)


def user_flat(bundle, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The call's tensors in the order of the bundle's user inputs."""
    from aotc._torch_compat import pytree
    from aotc.contract.outputs import load_spec
    from aotc.runtime.inputs import CallStructure

    in_spec = load_spec(bundle.signature.in_spec)
    arranged = CallStructure.of(in_spec).arrange(args, kwargs) if kwargs else kwargs
    flat, spec = pytree.tree_flatten((args, arranged))
    if spec != in_spec:
        raise NotRun("the call's structure is not the bundle's (non-tensor inputs?); the raw runner takes tensors only")
    return flat


# ----------------------------------------------------------------- training


@dataclass
class TrainRow:
    """What a training row's variants share: the model file, the inputs at the row's
    batch (on CPU), the optimizer's name, the device and the joint bundle."""

    source: Path
    inputs: tuple[tuple, dict]
    optimizer: str
    device: torch.device
    bundle: Path | None


@dataclass
class Step:
    """One training variant: `step()` runs a whole training step; `parameters()` its
    parameters by name, as the step leaves them; `setup_s` as for Variant."""

    step: Callable[[], object]
    parameters: Callable[[], dict[str, torch.Tensor]]
    setup_s: float | None = None


def gradient_sizes(row: TrainRow) -> dict[str, float]:
    """Each parameter's largest |gradient| in eager's first step (0 where it gets none)."""
    from benchmarks.gpu.models import fresh_module, load, to_device

    args, kwargs = to_device(row.inputs, row.device)
    model = fresh_module(row.source).to(row.device)
    load(row.source).training_loss()(model(*args, **kwargs), *args, **kwargs).backward()
    return {n: p.grad.abs().max().item() if p.grad is not None and p.grad.numel() else 0.0
            for n, p in model.named_parameters()}


def build_step(name: str, row: TrainRow) -> Step:
    from benchmarks.gpu.models import fresh_module, load, to_device, training_optimizer

    args, kwargs = to_device(row.inputs, row.device)
    if name in ("aotc-fused", "aotc-fused-cuda-graphs"):
        if row.bundle is None:
            raise NotRun("no aotc joint bundle (its export or compile failed; see the row's bundle)")
        import aotc

        graphs = name == "aotc-fused-cuda-graphs"
        if graphs and row.device.type != "cuda":
            raise NotRun("CUDA graphs need a CUDA device")
        start = time.perf_counter()
        try:
            loaded = aotc.load(row.bundle, backend="aoti", device=row.device, mode="train",
                               **({"cuda_graphs": True} if graphs else {}))
        except aotc.CudaGraphError as e:
            raise NotRun(f"aotc refuses CUDA graphs for this bundle: {e}") from e
        setup = time.perf_counter() - start
        return Step(lambda: loaded.train_step(*args, **kwargs), lambda: dict(loaded.named_parameters()), setup)
    model = fresh_module(row.source).to(row.device)  # each variant steps its own copy of the weights
    loss_fn = load(row.source).training_loss()
    # eager runs torch.optim's fused kernels, its fastest; the compiled step gets the default
    # (foreach on CUDA), which inductor fuses into its own kernels
    fused = True if name == "eager-fused" else None
    optimizer = training_optimizer(row.optimizer, model.parameters(), fused=fused)

    def step():
        loss = loss_fn(model(*args, **kwargs), *args, **kwargs)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss

    if name == "compile-step":
        step = torch.compile(step)
    elif name != "eager-fused":
        raise ValueError(f"unknown training variant {name!r}")
    return Step(step, lambda: dict(model.named_parameters()))
