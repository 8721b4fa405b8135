"""`aotc verify`: every artifact of a bundle against eager PyTorch.

Each artifact (fx; aoti for each device present and usable here; onnx) is loaded through
`aotc.load` and run on the golden inputs of reference.safetensors; its outputs, the inputs
and buffers after the call, and for training bundles the loss and every gradient are
compared with the references under the manifest's per-entry tolerances (each shape
profile's package too, against fx: aotc.tools.verify_profiles). Given a model file
(`model=`, --model), the eager model is rebuilt and compared with every artifact on random
inputs within the exported dynamic ranges; a model path recorded in the bundle is never
imported, since a bundle must not make aotc run code.

Integrity comes first (`integrity`): every hash, every archive's members, every
safetensors header and the weights against the metadata, with nothing loaded or run, so
a tampered file fails before anything runs. `run=False` stops there: the check to make
on a bundle from someone you do not trust, whose compiled artifacts are native code.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import torch

import aotc
from aotc._torch_compat import pytree
from aotc.bundle.archives import check_compiled_package, check_graph_archive, check_safetensors, load_safetensors
from aotc.bundle.files import Bundle
from aotc.bundle.signing import check_signature, require_signature, signed_root
from aotc.capture.module_copy import copy_module
from aotc.contract.aliasing import StrideGuard, dense_strides, realias
from aotc.contract.outputs import load_spec
from aotc.devices import resolve_device
from aotc.errors import AotcError, BundleError, CaptureError, InputError, InternalError
from aotc.runtime.inputs import random_inputs
from aotc.runtime.regional import RegionalBundle, apply, is_regional
from aotc.runtime.subclasses import caller_inputs
from aotc.sources.hf_folder import has_bundle_config
from aotc.sources.model_file import load_model
from aotc.tools.generation import StaticCacheLM
from aotc.tools.observe import input_key, is_input_entry, observe
from aotc.tools.rebuild import eager_from_bundle
from aotc.tools.reference import REFERENCE, run_eager, tolerance
from aotc.tools.verify_profiles import check_profiles

Tensors = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Check:
    """One artifact's value for one reference entry, against eager."""

    artifact: str
    name: str
    max_abs: float
    max_rel: float
    rtol: float
    atol: float
    passed: bool
    note: str = ""


@dataclass
class Report:
    """All checks of one verify run; `ok` only when every check passed."""

    bundle: str
    checks: list[Check] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    integrity: list[str] = field(default_factory=list)  # files whose content was checked
    ran: bool = True
    signature: str = ""  # the signature's status (aotc.bundle.signing.SignatureStatus.describe)

    @property
    def ok(self) -> bool:
        if not self.ran:
            return bool(self.integrity)
        return bool(self.checks) and all(c.passed for c in self.checks)

    @property
    def exit_code(self) -> int:
        """0 when every check passed, 1 otherwise (the CLI's exit status)."""
        return 0 if self.ok else 1


def integrity(bundle: Bundle) -> list[str]:
    """Check every file of an open bundle without loading or running any of it: archive
    members of graphs and compiled packages, safetensors headers, the weights against the
    metadata. Returns the files checked; a problem is a BundleError naming the file."""

    checked = []
    for entry in bundle.manifest.files:
        path = bundle.path / entry.path
        if entry.kind == "graph":
            check_graph_archive(path)
        elif entry.kind == "compiled":
            check_compiled_package(path)
        elif entry.path.endswith(".safetensors"):
            check_safetensors(path)
        checked.append(entry.path)
    bundle.weights()  # every tensor the graphs take, with its recorded dtype and shape
    return checked


def _mode(bundle: Bundle) -> str:
    kinds = bundle.graph_kinds
    return "joint" if "joint" in kinds else "autograd" if "forward" in kinds else "inference"


def artifacts(bundle: Bundle, device: str | None = None) -> tuple[list[tuple[str, str, str]], list[str]]:
    """(label, backend, device) of every artifact runnable here, and notes on the rest;
    with `device`, the fx graphs and the compiled package on that device alone."""
    if device is not None:
        return _artifacts_on(bundle, resolve_device(device))
    found = [("fx", "fx", "cpu")]
    skipped = []
    for device in sorted({f.device for f in bundle.manifest.files if f.kind == "compiled"}):
        if device == "cuda" and not torch.cuda.is_available():
            skipped.append("aoti/cuda: no CUDA device here")
            continue
        frozen = any(f.kind == "compiled" and f.device == device and (f.build or {}).get("frozen") == "true"
                     for f in bundle.manifest.files)
        found.append((f"aoti/{device}{' (frozen)' if frozen else ''}", "aoti", device))
    if any(f.kind == "onnx" for f in bundle.manifest.files):
        found.append(("onnx", "onnx", "cpu"))
    return found, skipped


def _artifacts_on(bundle: Bundle, device: torch.device) -> tuple[list[tuple[str, str, str]], list[str]]:
    name = device.type if device.index is None else str(device)
    found = [("fx" if device.type == "cpu" else f"fx/{name}", "fx", name)]
    skipped = []
    entries = [f for f in bundle.manifest.files if f.kind == "compiled" and f.device == device.type]
    if entries:
        frozen = any((f.build or {}).get("frozen") == "true" for f in entries)
        found.append((f"aoti/{name}{' (frozen)' if frozen else ''}", "aoti", name))
    else:
        skipped.append(f"aoti/{device.type}: no package compiled for it (aotc compile BUNDLE --device {device.type})")
    if any(f.kind == "onnx" for f in bundle.manifest.files):
        skipped.append(f"onnx: onnxruntime runs on the CPU here, not {name}")
    return found, skipped


def run_artifact(bundle: Bundle, backend: str, device: str, inputs, given: Tensors, trusted=(),
                 public_keys=None) -> Tensors:
    """Run one artifact like `run_eager` runs the model; `given` supplies grad_outputs."""
    with torch.set_grad_enabled(torch.is_grad_enabled()):
        return _run_artifact(bundle, backend, device, inputs, given, trusted, public_keys)


def _run_artifact(bundle: Bundle, backend: str, device: str, inputs, given: Tensors, trusted=(),
                  public_keys=None) -> Tensors:

    mode = _mode(bundle)
    # an inference graph captured in train mode (BatchNorm statistics) runs in train mode
    train = mode != "inference" or bundle.metadata.training
    module = aotc.load(bundle.path, backend=backend, device=device, mode="train" if train else "eval",
                       trusted_subclasses=trusted, public_keys=public_keys)
    names = [u.name for u in bundle.signature.user_inputs]
    args, kwargs = inputs
    return observe(module, args, kwargs, names, mode, grad_seed=0, given=given, device=device)


def compare(artifact: str, expected: Tensors, actual: Tensors, tolerances: dict, override) -> list[Check]:
    checks = []
    for name, want in expected.items():
        if is_input_entry(name):
            continue
        rtol, atol = override if override else tolerances.get(name, tolerance(want))
        got = actual.get(name)
        if got is None:
            checks.append(Check(artifact, name, float("nan"), float("nan"), rtol, atol, False, "missing"))
            continue
        if got.shape != want.shape or got.dtype != want.dtype:
            note = f"shape {tuple(got.shape)} {got.dtype} vs {tuple(want.shape)} {want.dtype}"
            checks.append(Check(artifact, name, float("nan"), float("nan"), rtol, atol, False, note))
            continue
        got, want = _wide(got), _wide(want)
        # a NaN where eager has NaN (a fully masked softmax row) or the same infinity is eager's
        # result; a NaN on one side only stays a difference of NaN, which no tolerance passes
        diff = (got - want).abs().masked_fill((got.isnan() & want.isnan()) | (got == want), 0.0)
        max_abs = diff.max().item() if diff.numel() else 0.0
        max_rel = (diff / want.abs().nan_to_num(1.0).clamp_min(1e-12)).max().item() if diff.numel() else 0.0
        passed = bool(torch.isclose(got, want, rtol=rtol, atol=atol, equal_nan=True).all())
        checks.append(Check(artifact, name, max_abs, max_rel, rtol, atol, passed))
    return checks


def _wide(t: torch.Tensor) -> torch.Tensor:
    """`t` in float64, or complex128 where it is complex (float64 would drop the imaginary part)."""
    return t.to(torch.complex128 if t.is_complex() else torch.float64)


def _golden(bundle: Bundle) -> Tensors:

    if bundle.manifest.file(REFERENCE) is None:
        raise AotcError(
            f"Bundle '{bundle.path}' has no {REFERENCE} (exported by an older aotc); export it again "
            "to verify it."
        )
    golden = load_safetensors(bundle.path / REFERENCE)
    for name, meta in zip((u.name for u in bundle.signature.user_inputs), bundle.metadata.user_inputs):
        t = golden.get(input_key(name))
        if t is None or str(t.dtype).removeprefix("torch.") != meta.dtype or list(t.shape) != meta.shape:
            raise BundleError(
                f"{bundle.path}/{REFERENCE}: 'input:{name}' is missing or unlike the input metadata.json "
                f"records ({meta.dtype} {meta.shape}). The bundle is damaged; export it again."
            )
    return golden


def _golden_inputs(bundle: Bundle, golden: Tensors, trusted=()):
    names = [u.name for u in bundle.signature.user_inputs]
    flat = [_laid_out(golden[input_key(n)], meta) for n, meta in zip(names, bundle.metadata.user_inputs)]
    program = next(iter(bundle.metadata.programs.values()))
    for dup, first in program.duplicate_user_inputs.items():
        flat[int(dup)] = flat[first]  # captured as the same tensor: pass it so again
    flat = realias(flat, program.aliased_inputs)  # views of one tensor: pass them so again
    return caller_inputs(bundle, pytree.tree_unflatten(flat, load_spec(bundle.signature.in_spec)), trusted)


def replay_fresh(root: Path, model_name: str) -> None:
    """At export: the bundle just written at `root`, run on fx with the example inputs,
    gives what eager gave (reference.safetensors: outputs, inputs after the call, and for
    training graphs every gradient); else CaptureError. What eager runs, a bundle runs
    too, or it is refused here and not first at a user's call."""

    try:
        bundle = Bundle.open(root)
        golden = _golden(bundle)
        inputs = _golden_inputs(bundle, golden)
    except (BundleError, InputError) as e:  # a bundle aotc just wrote: never the user's to fix
        raise InternalError(f"aotc's check of the bundle it is writing failed: {e} This is a bug in aotc; "
                            "please report it.") from e
    try:
        # export's own bundle, not yet signed: no signature to ask for, whatever AOTC_PUBLIC_KEYS says
        actual = run_artifact(bundle, "fx", "cpu", inputs, golden, public_keys=())
    except (BundleError, InputError) as e:
        raise InternalError(f"the bundle aotc is writing for {model_name} does not load or take its own example "
                            f"inputs: {e} This is a bug in aotc; please report it.") from e
    except AotcError as e:
        raise CaptureError(f"the bundle of {model_name} fails when run on the example inputs: {e}") from e
    failed = [c for c in compare("fx", golden, actual, bundle.manifest.tolerances, None) if not c.passed]
    if failed:
        shown = "; ".join(
            f"{c.name} {c.note}" if c.note else f"{c.name} differs by up to {c.max_abs:.3g}" for c in failed[:4]
        )
        raise CaptureError(
            f"the bundle of {model_name} does not give eager's results on the example inputs: {shown}"
            f"{f' (and {len(failed) - 4} more)' if len(failed) > 4 else ''}. Eager may run another code path "
            "than the one torch traced (nn.TransformerEncoder's fast path under no_grad is one); aotc "
            "refuses to write a bundle that computes something else. Please report this model."
        )


def _laid_out(t: torch.Tensor, meta) -> torch.Tensor:
    """`t` (stored contiguous) with the strides the example input had, where they were
    static and dense: the compiled graphs were built for that layout."""

    stride = tuple(meta.stride)
    if meta.dynamic_dims or tuple(t.stride()) == stride or len(stride) != t.dim():
        return t
    if stride != tuple(dense_strides(meta.shape, StrideGuard.of(meta.shape, meta.stride, static=True).order)):
        return t  # overlapping or with gaps: no tensor of its own has that layout
    return torch.empty_strided(t.shape, stride, dtype=t.dtype, device=t.device).copy_(t)


def verify(path, model: str | None = None, rtol: float | None = None, atol: float | None = None,
           samples: int = 0, run: bool = True, checkpoint: str | None = None, trusted_subclasses=(),
           on_artifact=None, public_keys=None, device: str | None = None) -> Report:
    """Verify every artifact of the bundle at `path`; see the module docstring.
    `trusted_subclasses`, `public_keys`: as for aotc.load (with keys, a bundle they did not
    sign is a SignatureError before anything else). `on_artifact(label, done, total)` is
    told before each artifact runs (done = how many have), and once more when all have.
    `device`: run the fx graphs, the compiled package and the rebuilt eager model on that
    device alone (eager on the same GPU as the artifacts)."""

    signature = _signature(path, public_keys)
    if is_regional(path):
        report = verify_regions(path, model, rtol, atol, run, checkpoint, trusted_subclasses, public_keys)
        return dataclasses.replace(report, signature=signature)
    bundle = Bundle.open(path)  # hashes first: a tampered bundle fails before anything runs
    report = Report(str(bundle.path), integrity=integrity(bundle), ran=run, signature=signature)
    if not run:
        report.skipped.append("running the artifacts (integrity only)")
        return report
    golden = _golden(bundle)
    override = (rtol if rtol is not None else 1e-4, atol if atol is not None else 1e-5) if (
        rtol is not None or atol is not None) else None
    found, report.skipped = artifacts(bundle, device)
    inputs = _golden_inputs(bundle, golden, trusted_subclasses)
    rebuilt = bool(samples and (model or has_bundle_config(bundle)))  # a HF folder's bundle rebuilds itself
    total = len(found) * (1 + (samples if rebuilt else 0))
    for done, (label, backend, device) in enumerate(found):
        if on_artifact:
            on_artifact(label, done, total)
        actual = run_artifact(bundle, backend, device, inputs, golden, trusted_subclasses, public_keys)
        report.checks += compare(label, golden, actual, bundle.manifest.tolerances, override)
        if backend == "aoti":  # each shape profile's package at its ends and middle, against fx
            report.checks += check_profiles(bundle, device, run_artifact, compare, override, trusted_subclasses,
                                            public_keys)

    if rebuilt:
        report.checks += _rebuilt_eager(bundle, model, checkpoint, found, samples, override, trusted_subclasses,
                                        on_artifact, public_keys, device)
    elif samples:
        report.skipped.append("random samples: no model file given (model=, --model)")
    if on_artifact:
        on_artifact("done", total, total)
    return report


def _signature(path, public_keys) -> str:
    """The signature's status in words; with keys configured, a SignatureError unless one signed it."""
    status = require_signature(path, public_keys) or check_signature(signed_root(path), [])
    return status.describe()


def verify_regions(path, model: str | None, rtol, atol, run: bool = True, checkpoint=None, trusted=(),
                   public_keys=None) -> Report:
    """A regional bundle: every group's bundle as `verify` checks one (its references),
    then, given the model file, the whole model with the regions applied against eager
    on its example inputs, for each backend every group has."""

    rb = RegionalBundle.open(path)
    report = Report(str(rb.path), ran=run)
    for name, bundle in rb.groups.items():
        report.integrity += [f"{rb.path.name}/groups/{name}/{f}" for f in integrity(bundle)]
        if run:
            group = verify(bundle.path, rtol=rtol, atol=atol, trusted_subclasses=trusted, public_keys=public_keys)
            report.checks += [dataclasses.replace(c, artifact=f"{name}/{c.artifact}") for c in group.checks]
            report.skipped += [f"{name}: {s}" for s in group.skipped if "random samples" not in s]
    if not run:
        report.skipped.append("running the artifacts (integrity only)")
        return report
    if not model:
        report.skipped.append("the whole model with its regions applied: no model file given (model=, --model)")
        return report
    spec = load_model(model, checkpoint=checkpoint)
    backends = ["fx"] + (["aoti"] if all(any(f.kind == "compiled" and f.device == "cpu" for f in b.manifest.files)
                                         for b in rb.groups.values()) else [])
    override = (rtol if rtol is not None else 1e-4, atol if atol is not None else 1e-5)
    training = rb.manifest.graph_kinds != ["inference"]
    names = [f"input:{i}" for i in range(len(pytree.tree_leaves((spec.args, spec.kwargs))))]
    mode = "autograd" if training else "inference"
    expected = run_eager(copy_module(spec.module).train(training), spec.args, spec.kwargs, names, mode)
    for backend in backends:
        regional = apply(rb.path, copy_module(spec.module).train(training), backend=backend,
                         trusted_subclasses=trusted, public_keys=public_keys)
        actual = observe(regional, spec.args, spec.kwargs, names, mode)
        report.checks += compare(f"model with regions ({backend})", expected, actual, {}, override)
    return report


def _rebuilt_eager(bundle, source, checkpoint, found, samples, override, trusted=(), on_artifact=None,
                   public_keys=None, device: str | None = None) -> list[Check]:
    """The artifacts against eager on random inputs: eager is the model `source` builds, or
    for a bundle exported from a Hugging Face folder, the one its hf/config.json builds."""
    if source:
        spec = load_model(source, checkpoint=checkpoint)
        model, loss = spec.module, spec.training_loss()
    else:  # exported from a Hugging Face folder: its config and weights are in the bundle
        model, loss = eager_from_bundle(bundle), None
    if source and bundle.manifest.generation is not None:
        # a generation bundle's graphs are the model over its static KV cache

        g = bundle.manifest.generation
        model = StaticCacheLM(model.eval(), g.batch_size, g.max_cache_len).eval()
    mode = _mode(bundle)
    names = [u.name for u in bundle.signature.user_inputs]
    in_spec = load_spec(bundle.signature.in_spec)
    # a joint bundle that carries its optimizer: eager steps torch.optim's, from the bundle's state
    optimizer = (bundle.metadata.optimizer, bundle.optimizer_state()) if bundle.metadata.optimizer else None
    checks = []
    for sample in range(samples):
        inputs = caller_inputs(bundle, random_inputs(bundle.metadata, in_spec, seed=sample + 1, vary_dynamic=True),
                               trusted)
        expected = run_eager(copy_module(model).train(bundle.metadata.training), *inputs, names, mode,
                             loss, grad_seed=sample + 1, optimizer=optimizer, device=device)
        for k, (label, backend, device) in enumerate(found):
            if on_artifact:
                on_artifact(f"{label} vs eager (sample {sample + 1})", len(found) * (1 + sample) + k,
                            len(found) * (1 + samples))
            actual = run_artifact(bundle, backend, device, inputs, expected, trusted, public_keys)
            checks += compare(f"{label} vs eager (sample {sample + 1})", expected, actual, {}, override)
    return checks

