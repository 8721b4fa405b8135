"""The sweep's columns: what each backend does with one case, compared with eager.

Anchors (what a user could pick instead): torch.export (strict=False, run through
`.module()`), the same with transformers' cache classes registered as pytrees the way its
own exporter does, torch.onnx (dynamo) run in onnxruntime, and torch.compile.
aotc: fx, onnx and aoti inference bundles, and fx forward+backward; `regions` (aotc's
regional export) is tried only where fx is refused.

Every column returns an Outcome:
- pass: values, structure and user access as eager's;
- WRONG: it ran and gave something else;
- refused: aotc said no by name (an AotcError), first line kept;
- fail: an anchor raised;
- crash: aotc raised something that is not an AotcError (aotc's own bug);
- n/a: not tried (what it needs failed first).
"""

from __future__ import annotations

import contextlib
import copy
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from benchmarks.sweep.compare import access_differs, differs
from benchmarks.sweep.noise import gradient_noise, grads, inference_noise

VALUES = {"fx": dict(rtol=1e-4, atol=1e-5), "aoti": dict(rtol=1e-4, atol=1e-5), "onnx": dict(rtol=1e-3, atol=1e-4),
          "compile": dict(rtol=1e-3, atol=1e-4)}
GRADS = dict(rtol=1e-3, atol=1e-4)


@dataclass
class Outcome:
    status: str
    detail: str = ""
    seconds: float = 0.0


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def first_line(e: BaseException) -> str:
    text = _ANSI.sub("", str(e)).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300] if text else ''}"


@dataclass
class Context:
    """One case, built once: the model, its inputs, eager's output, and what columns made."""

    name: str
    library: str
    model: torch.nn.Module
    inputs: dict[str, Any]
    eager: Any
    root: Path
    earlier: dict[str, str] = field(default_factory=dict)  # column -> status, from an earlier pass
    made: dict[str, Any] = field(default_factory=dict)  # column -> its bundle path, when it made one
    _noise: dict[int, float] | None = None

    def fx_status(self) -> str | None:
        return "pass" if "fx" in self.made else self.earlier.get("fx")

    def noise(self) -> dict[int, float]:
        """Per float32 tensor of eager's output (by id): 4x its rounding noise, how far a correct
        graph that sums in another order lands (aotc's fx decomposes grid_sample: Deformable
        DETR lands 6e-5 off). The noise is eager's distance from eager in float64, or where
        the model does not run in float64 or an output moves by over 1% there (another path),
        from eager at another thread count, as aotc's own references measure it
        (aotc.tools.reference): Grounding DINO's outputs move 0.026 of 3.2 between 1 and 2
        threads, and 2.7% in float64."""
        if self._noise is None:
            self._noise = inference_noise(self.model, self.inputs, self.eager)
        return self._noise

    def call(self, module: Callable) -> Any:
        torch.manual_seed(0)
        with torch.no_grad():
            return module(**self.inputs)


def _aotc_error(e: BaseException) -> bool:
    from aotc.errors import AotcError

    return isinstance(e, AotcError)


def _checked(got: Any, ctx: Context, tol: dict) -> Outcome:
    noise = ctx.noise()
    why = differs(got, ctx.eager, tol, noise)
    if why is None:
        paths, why = access_differs(got, ctx.eager, tol, noise)
        if why is None:
            return Outcome("pass", f"{paths} access paths")
    return Outcome("WRONG", why)


# ----------------------------------------------------------------------- anchors


def torch_export(ctx: Context) -> Outcome:
    program = torch.export.export(ctx.model, (), ctx.inputs, strict=False)
    return _checked(ctx.call(program.module()), ctx, VALUES["fx"])


@contextlib.contextmanager
def cache_pytrees(ctx: Context):
    """transformers' own exporter registers every cache class as a pytree first; they are
    deregistered after, so the next case's plain torch.export is plain again."""
    from transformers.exporters.exporter_dynamo import register_cache_pytrees_for_model

    from aotc._torch_compat import pytree

    before = set(pytree.SUPPORTED_NODES)
    register_cache_pytrees_for_model(ctx.model)
    try:
        yield
    finally:
        for cls in set(pytree.SUPPORTED_NODES) - before:
            pytree._deregister_pytree_node(cls)


def torch_export_caches(ctx: Context) -> Outcome:
    if ctx.library != "transformers":
        return Outcome("n/a", "transformers only")
    with cache_pytrees(ctx):
        return torch_export(ctx)


def torch_onnx(ctx: Context) -> Outcome:
    import onnxruntime

    from aotc._torch_compat import pytree

    path = ctx.root / "anchor.onnx"
    torch.onnx.export(ctx.model, (), str(path), kwargs=ctx.inputs, dynamo=True, verbose=False)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {i.name: ctx.inputs[i.name].numpy() for i in session.get_inputs()}
    got = [torch.from_numpy(x) for x in session.run(None, feeds)]
    want = [x for x in pytree.tree_leaves(ctx.eager) if isinstance(x, torch.Tensor)]
    if len(got) != len(want):
        return Outcome("WRONG", f"{len(got)} outputs where eager has {len(want)} tensors")
    why = differs(got, want, VALUES["onnx"], ctx.noise())
    return Outcome("WRONG", why) if why else Outcome("pass")


def torch_compile(ctx: Context) -> Outcome:
    torch._dynamo.reset()
    compiled = torch.compile(copy.deepcopy(ctx.model))
    return _checked(ctx.call(compiled), ctx, VALUES["compile"])


# ----------------------------------------------------------------------- aotc


def aotc_fx(ctx: Context) -> Outcome:
    import aotc

    path = ctx.root / "fx"
    aotc.export(ctx.model, ((), ctx.inputs), path)
    ctx.made["fx"] = path  # the bundle exists: onnx and aoti build on it even where fx is WRONG
    return _checked(ctx.call(aotc.load(path, backend="fx")), ctx, VALUES["fx"])


def _with_artifact(ctx: Context, backend: str, add: Callable[[Path], Any]) -> Outcome:
    import aotc

    if ctx.fx_status() != "pass":
        return Outcome("n/a", "needs the fx bundle")
    if "fx" not in ctx.made:  # fx ran in an earlier pass: the same export again
        aotc.export(ctx.model, ((), ctx.inputs), ctx.root / "fx")
        ctx.made["fx"] = ctx.root / "fx"
    path = ctx.root / backend
    shutil.copytree(ctx.made["fx"], path)
    add(path)
    loaded = aotc.load(path, backend=backend)
    return _checked(ctx.call(loaded), ctx, VALUES[backend])


def aotc_onnx(ctx: Context) -> Outcome:
    from exporters.onnx import add_to_bundle

    return _with_artifact(ctx, "onnx", add_to_bundle)


def aotc_aoti(ctx: Context) -> Outcome:
    import aotc

    return _with_artifact(ctx, "aoti", aotc.compile)


def _grad_tolerance(noise: float | None) -> dict:
    return GRADS if noise is None else dict(rtol=GRADS["rtol"], atol=max(GRADS["atol"], 4 * noise))


def aotc_fwd_bwd(ctx: Context) -> Outcome:
    import aotc

    path = ctx.root / "fwd-bwd"
    eager = copy.deepcopy(ctx.model)
    try:  # forward+backward bundles train: eager itself may refuse these inputs in training mode
        grads(copy.deepcopy(ctx.model).train(), ctx.inputs)
    except Exception as e:
        return Outcome("n/a", f"eager fails in training mode: {first_line(e)}")
    aotc.export(eager, ((), ctx.inputs), path, graphs=("forward", "backward"))
    loaded = aotc.load(path, backend="fx", mode="train")
    eager.train(loaded.training)
    want, want_grads = grads(eager, ctx.inputs)
    if want is None:
        return Outcome("n/a", "no output takes a gradient")
    got, got_grads = grads(loaded, ctx.inputs)
    noise = gradient_noise(ctx.model, ctx.inputs, eager.training, want, want_grads)
    why = differs(got, want, _grad_tolerance(noise.get("loss")))
    if why:
        return Outcome("WRONG", f"loss: {why}")
    for name, p in eager.named_parameters():
        g = got_grads.get(name)
        if name not in want_grads:
            if g is not None and g.any():
                return Outcome("WRONG", f"{name}: a gradient where eager has none")
            continue
        if g is None:
            return Outcome("WRONG", f"{name}: no gradient where eager has one")
        why = differs(g, want_grads[name], _grad_tolerance(noise.get(name)))
        if why:
            return Outcome("WRONG", f"grad {name}: {why}")
    return Outcome("pass", f"{len(want_grads)} gradients")


def aotc_regions(ctx: Context) -> Outcome:
    """aotc's regional export, where the whole model cannot be one graph."""
    import aotc

    if ctx.fx_status() in ("pass", None):
        return Outcome("n/a", "fx took the whole model" if ctx.fx_status() else "fx has not run")
    path = ctx.root / "regions"
    aotc.export_regions(ctx.model, ((), ctx.inputs), path, regions="auto")
    model = aotc.apply(path, copy.deepcopy(ctx.model), backend="fx")
    return _checked(ctx.call(model), ctx, VALUES["fx"])


# in the order they run: aotc first, the anchors after (the one that registers transformers'
# caches as pytrees last: while they are registered, torch flattens them)
COLUMNS: dict[str, Callable[[Context], Outcome]] = {
    "fx": aotc_fx,
    "onnx": aotc_onnx,
    "aoti": aotc_aoti,
    "fwd+bwd": aotc_fwd_bwd,
    "regions": aotc_regions,
    "torch.export": torch_export,
    "torch.onnx": torch_onnx,
    "torch.compile": torch_compile,
    "torch.export+caches": torch_export_caches,
}
ANCHORS = ("torch.export", "torch.onnx", "torch.compile", "torch.export+caches")


TRAINING_EXPORT_FAILS = " [torch.export in training mode fails too: "


def _torch_export_in_training(ctx: Context) -> str:
    """Forward+backward bundles capture the model in training mode, which can take code
    paths eval mode does not (DETR's clamp of non-finite states): where torch.export of the
    training-mode model fails too, the refusal is one torch has, and the row says so. As in
    the +caches anchor, transformers' caches are registered first: a cache in the output is
    no reason of torch's."""
    with cache_pytrees(ctx) if ctx.library == "transformers" else contextlib.nullcontext():
        try:
            torch.export.export(copy.deepcopy(ctx.model).train(), (), ctx.inputs, strict=False)
        except Exception as e:
            return f"{TRAINING_EXPORT_FAILS}{first_line(e)}]"
    return ""


TORCH_AOTI_FAILS = " [torch's AOTInductor fails on torch.export's program too: "


def _torch_aoti(ctx: Context) -> str:
    """Where aotc's AOTInductor package is refused: whether torch's own AOTInductor compile of
    torch.export's program (transformers' caches registered, as its exporter does) fails
    too, a refusal torch has; the row says so. Where torch.export itself fails, nothing is
    learnt, and the refusal stays aotc's."""
    def export():
        return torch.export.export(copy.deepcopy(ctx.model), (), ctx.inputs, strict=False)

    with cache_pytrees(ctx) if ctx.library == "transformers" else contextlib.nullcontext():
        try:
            program = export()
        except Exception:
            return ""
        try:
            torch._inductor.aoti_compile_and_package(program, package_path=str(ctx.root / "torch-aoti.pt2"))
        except Exception as e:
            return f"{TORCH_AOTI_FAILS}{first_line(e)}]"
    return ""


def run_column(name: str, ctx: Context) -> Outcome:
    start = time.perf_counter()
    try:
        outcome = COLUMNS[name](ctx)
    except Exception as e:  # the column's answer: by whom and in what words it was refused
        if name in ANCHORS:
            outcome = Outcome("fail", first_line(e))
        else:
            outcome = Outcome("refused" if _aotc_error(e) else "crash", first_line(e))
            if name == "fwd+bwd" and outcome.status == "refused":
                outcome.detail += _torch_export_in_training(ctx)
            if name == "aoti" and outcome.status == "refused":
                outcome.detail += _torch_aoti(ctx)
    outcome.seconds = round(time.perf_counter() - start, 1)
    return outcome
