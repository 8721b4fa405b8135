"""Writing a captured model as a bundle: weights, eager's references, the fx graphs,
signature, metadata and manifest, into a staging folder that takes the target's place
only when complete (aotc.bundle.staging_dir).

What export checks on the written bundle (replay against eager, small dynamic sizes) is
passed in as `check` by the layer above (aotc.api), so that writing a bundle needs
nothing of verify's code.
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch
from safetensors.torch import save_file

from aotc import __version__
from aotc import _torch_compat as tc
from aotc._torch_compat import pytree
from aotc.bundle.files import METADATA, SIGNATURE, WEIGHTS, Bundle, BundleWriter, staging_dir
from aotc.bundle.schema import FORMAT_VERSION, GenerationInfo, Manifest, Metadata, ModelInfo, Signature
from aotc.capture import Capture
from aotc.capture.inputs import BoundCall
from aotc.contract.ambient import current
from aotc.contract.call_form import portable
from aotc.contract.optimizers import OPTIMIZER_STATE
from aotc.errors import BundleError, CaptureError, InternalError
from aotc.exporters import formats
from aotc.tools import reference

PhaseCallback = Callable[[str], None]
Check = Callable[[Path, Metadata], Metadata]


# what safetensors has no dtype for: a bundle holds its tensors in safetensors files only
UNSTORABLE = (torch.complex128, torch.complex32)


def storable(tensors: dict[str, torch.Tensor], what: str) -> None:
    """CaptureError naming the tensors of `tensors` (`what` they are) that no safetensors
    file can hold, before anything is written."""
    found = [f"'{k}' ({str(v.dtype).removeprefix('torch.')})" for k, v in tensors.items() if v.dtype in UNSTORABLE]
    if found:
        raise CaptureError(
            f"{what} {', '.join(found[:4])}{f' and {len(found) - 4} more' if len(found) > 4 else ''} cannot be "
            "stored: a bundle holds its tensors in safetensors files, which have no complex128 or complex32. "
            "Keep complex numbers inside the model's computation (complex64 can be stored), or hold and pass "
            "them as their real and imaginary parts (torch.view_as_real) in float64.")


def _write_weights(capture_: Capture, writer: BundleWriter) -> None:
    # safetensors wants contiguous, unshared storage: one copy per name.
    constants = {k: v for graph in capture_.graphs.values() for k, v in graph.constants.items()}
    tensors = {k: v.detach().contiguous().clone() for k, v in (capture_.state | constants).items()}
    storable(tensors, "the model's parameters, buffers and constants")
    save_file(tensors, str(writer.path(WEIGHTS)), metadata={"format": "pt"})
    writer.add(WEIGHTS, "weights")


@dataclass(frozen=True)
class Contents:
    """What a bundle holds beside its captured graphs: the capture mode, the model's
    description, the loss its references were computed with, files copied in as they
    are (path in the bundle -> file, e.g. a tokenizer's), a generation bundle's info."""

    mode: str
    model: ModelInfo
    loss: Callable[..., torch.Tensor] | None = None
    assets: dict[str, Path] | None = None
    generation: GenerationInfo | None = None


def write_bundle(captured: Capture, module: torch.nn.Module, call: BoundCall, out: Path,
                 contents: Contents, *, force: bool = False, on_phase: PhaseCallback | None = None,
                 check: Check | None = None) -> Bundle:
    """Write a captured model as a bundle at `out` (atomically), with eager's references
    for the call it was captured on. `check(root, metadata)` runs on the complete bundle before it
    takes `out`'s place (a bundle that fails it is never written) and may return the
    metadata revised (aotc.api's replay and small-size checks: the layer above)."""
    mode, info, loss, assets, generation = (contents.mode, contents.model, contents.loss, contents.assets,
                                            contents.generation)
    if on_phase:
        on_phase("write")
    names = [u.name for u in captured.user_inputs]
    ambient = current()  # export leaves the caller's state as it found it
    fused = (captured.optimizer, captured.optimizer_state) if captured.optimizer is not None else None
    golden, tolerances = reference.compute(module, call.args, call.kwargs, names, mode, loss, captured.training,
                                          fused)
    storable(golden, "the example call's inputs and eager's results")
    with staging_dir(out, force) as root:
        writer = BundleWriter(root)
        _write_weights(captured, writer)
        if captured.optimizer is not None:
            save_file(captured.optimizer_state, str(writer.path(OPTIMIZER_STATE)), metadata={"format": "pt"})
            writer.add(OPTIMIZER_STATE, "optimizer")
        save_file({k: v.contiguous() for k, v in golden.items()}, str(writer.path(reference.REFERENCE)))
        writer.add(reference.REFERENCE, "reference")
        formats.get("fx").write(captured, writer)
        for rel, src in (assets or {}).items():
            writer.copy(rel, src, "hf")
        signature = Signature(
            in_spec=_dumps(portable(captured.in_spec)),
            out_spec=_dumps(captured.out_spec),
            user_inputs=captured.user_inputs,
            num_user_outputs=captured.num_user_outputs,
            graphs={k: g.signature for k, g in captured.graphs.items()},
            state_aliases=captured.state_aliases,
            non_persistent_buffers=captured.non_persistent_buffers,
            constant_inputs=captured.constant_inputs,
        )
        metadata = Metadata(
            training=captured.training, user_inputs=captured.user_input_meta, programs=captured.programs,
            subclasses=captured.subclasses,
            ambient=ambient,
            optimizer=captured.optimizer,
        )
        writer.write_json(SIGNATURE, signature, "signature")
        writer.write_json(METADATA, metadata, "metadata")
        manifest = Manifest(
            format_version=FORMAT_VERSION,
            aotc_version=__version__,
            torch_version=torch.__version__,
            python_version=platform.python_version(),
            created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            model=info,
            graph_kinds=list(captured.graphs),
            partitioner=captured.partitioner,
            files=[],  # BundleWriter lists every file it wrote
            tolerances=tolerances,
            generation=generation,
            export_schema=list(tc.export_schema_version()),
        )
        writer.write_manifest(manifest)
        if check is not None:
            revised = check(root, metadata)
            if revised is not metadata:
                writer.write_json(METADATA, revised, "metadata")
                writer.write_manifest(manifest)
    try:
        return Bundle.open(out)
    except BundleError as e:  # the bundle aotc just wrote: never the user's to fix
        raise InternalError(f"aotc's check of the bundle it wrote failed: {e} This is a bug in aotc; please "
                            "report it.") from e


def _dumps(spec) -> str:
    return pytree.treespec_dumps(spec)
