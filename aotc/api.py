"""The library API behind the CLI: `export` (and, later, `compile` and `load`)."""

from __future__ import annotations

import copy
import platform
import warnings
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from aotc.bundle import (
    METADATA,
    SIGNATURE,
    WEIGHTS,
    Bundle,
    BundleWriter,
    check_target,
    check_writable,
    staging_dir,
)
from aotc._torch_compat import pytree
from aotc.capture import MODES, Capture, CaptureOptions, capture
from aotc.errors import AotcError, CaptureError, GraphBreakError, RangeNarrowedWarning
from aotc.model_file import FunctionModule, _split_inputs
from aotc.schema import FORMAT_VERSION, GenerationInfo, Manifest, Metadata, ModelInfo, Signature

from aotc import __version__

PhaseCallback = Callable[[str], None]


def mode_for_graphs(graphs: Sequence[str]) -> str:
    wanted = tuple(graphs)
    for mode, kinds in MODES.items():
        if wanted == kinds or (set(wanted) == set(kinds) and len(wanted) == len(kinds)):
            return mode
    raise AotcError(
        f"graphs={wanted!r} is not a graph set aotc captures; use one of "
        + ", ".join(repr(k) for k in MODES.values())
    )


def _write_weights(capture_: Capture, writer: BundleWriter) -> None:
    from safetensors.torch import save_file

    # safetensors wants contiguous, unshared storage: one copy per name.
    constants = {k: v for graph in capture_.graphs.values() for k, v in graph.constants.items()}
    tensors = {k: v.detach().contiguous().clone() for k, v in (capture_.state | constants).items()}
    save_file(tensors, str(writer.path(WEIGHTS)), metadata={"format": "pt"})
    writer.add(WEIGHTS, "weights")


def export(
    model: torch.nn.Module | Callable[..., Any],
    example_inputs: Any,
    out: str | Path,
    graphs: Sequence[str] = ("inference",),
    loss: Callable[..., torch.Tensor] | None = None,
    dynamic_shapes: Any = None,
    *,
    partitioner: str = "min-cut",
    train: bool = False,
    force: bool = False,
    name: str | None = None,
    source: str | None = None,
    checkpoint: str | None = None,
    task: str | None = None,
    assets: dict[str, Path] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    on_phase: PhaseCallback | None = None,
) -> Bundle:
    """Capture `model` on `example_inputs` and write a bundle to `out`.

    `graphs` is ("inference",), ("joint",) or ("forward", "backward"); training graphs
    need `loss(outputs, *inputs)` for "joint". A joint graph can carry `optimizer` (a
    torch.optim.SGD or AdamW over the model's parameters, see aotc.optimizers): then
    `train_step` runs loss, gradients and the update in one graph, as
    `loss.backward(); optimizer.step(); optimizer.zero_grad()`. `assets` (path in the bundle -> file) are
    copied in as they are, e.g. a tokenizer's files. The write is atomic: `out` is replaced
    only by a complete bundle, and only with `force=True`.
    """
    out = Path(out)
    check_target(out, force)  # fail before seconds of tracing, not after
    check_writable(out)
    module = model if isinstance(model, torch.nn.Module) else FunctionModule(model)
    args, kwargs = _split_inputs(example_inputs, "example_inputs")
    mode = mode_for_graphs(graphs)
    fused = None
    if optimizer is not None:  # refused before seconds of tracing
        from aotc import optimizers

        if mode != "joint":
            raise AotcError("optimizer= needs a joint graph (graphs=(\"joint\",)): the update runs after the "
                            "gradients inside it.")
        info = optimizers.describe(optimizer, module)
        fused = (info, optimizers.initial_state(info, optimizer, module))
    options = CaptureOptions(mode=mode, partitioner=partitioner, train=train, dynamic_shapes=dynamic_shapes)

    if on_phase:
        on_phase("capture")
    try:
        captured = capture(module, args, kwargs, loss=loss, options=options)
    except CaptureError as e:
        if e.__cause__ is None or isinstance(e, GraphBreakError):
            raise  # aotc's own refusal, which says what to do
        raise _with_break_report(e, module, args, kwargs) from e.__cause__
    if fused is not None:
        captured = _with_optimizer(captured, *fused)
    for line in captured.narrowed:
        warnings.warn(line, RangeNarrowedWarning, stacklevel=2)
    info = ModelInfo(
        name=name or type(module).__name__.lower(),
        source=source,
        class_name=type(module).__name__,
        training=captured.training,
        checkpoint=checkpoint,
        num_parameters=sum(p.numel() for p in module.parameters()),
        task=task,
    )
    return write_bundle(captured, module, args, kwargs, out, mode, info, loss=loss, force=force, assets=assets,
                        on_phase=on_phase)


def _with_optimizer(captured: Capture, info, state: dict) -> Capture:
    import dataclasses

    from aotc.capture.optimizer_step import fuse_optimizer

    if captured.subclasses is not None:
        raise AotcError("a joint graph over tensor-subclass parameters cannot carry its optimizer yet; export "
                        "without optimizer= and call optimizer.step() after train_step.")
    graphs = {"joint": fuse_optimizer(captured.graphs["joint"], info, state)}
    return dataclasses.replace(captured, graphs=graphs, optimizer=info, optimizer_state=state)


def _with_break_report(error: CaptureError, module: torch.nn.Module, args: tuple, kwargs: dict) -> CaptureError:
    """torch's failure to capture `module`, with every place that cannot be captured
    (aotc.breaks) when Dynamo finds them; else the error as it was."""
    from aotc.breaks import describe, report

    with torch.no_grad():
        try:
            breaks = report(copy.deepcopy(module), args, kwargs)
        except Exception:  # the report is a help; the capture error stands without it
            return error
    if not breaks:
        return error
    return GraphBreakError(
        f"{type(module).__name__} cannot be captured whole: {len(breaks)} place(s) in its code cannot be "
        f"traced:\n{describe(breaks)}\nOr export the submodules that can be captured: --regions auto "
        f"(regions= in aotc.export_regions), with the rest staying Python.\n(torch.export: {error})",
        breaks,
    )


def write_bundle(captured: Capture, module: torch.nn.Module, args: tuple, kwargs: dict, out: Path, mode: str,
                 info: ModelInfo, *, loss=None, force: bool = False, assets: dict[str, Path] | None = None,
                 generation: GenerationInfo | None = None, on_phase: PhaseCallback | None = None) -> Bundle:
    """Write a captured model as a bundle at `out` (atomically), with eager's references
    for the example inputs; replay it on them (a bundle that does not give eager's results
    is never written), and check the small sizes of its dynamic dims."""
    if on_phase:
        on_phase("write")
    from aotc import formats

    from aotc import reference
    from safetensors.torch import save_file

    names = [u.name for u in captured.user_inputs]
    from aotc.ambient import current

    ambient = current()  # export leaves the caller's state as it found it
    fused = (captured.optimizer, captured.optimizer_state) if captured.optimizer is not None else None
    golden, tolerances = reference.compute(module, args, kwargs, names, mode, loss, captured.training, fused)
    with staging_dir(out, force) as root:
        writer = BundleWriter(root)
        _write_weights(captured, writer)
        if captured.optimizer is not None:
            from aotc.optimizers import OPTIMIZER_STATE

            save_file(captured.optimizer_state, str(writer.path(OPTIMIZER_STATE)), metadata={"format": "pt"})
            writer.add(OPTIMIZER_STATE, "optimizer")
        save_file({k: v.contiguous() for k, v in golden.items()}, str(writer.path(reference.REFERENCE)))
        writer.add(reference.REFERENCE, "reference")
        formats.get("fx").write(captured, writer)
        for rel, src in (assets or {}).items():
            writer.copy(rel, src, "hf")
        signature = Signature(
            in_spec=_dumps(captured.in_spec),
            out_spec=_dumps(captured.out_spec),
            user_inputs=captured.user_inputs,
            num_user_outputs=captured.num_user_outputs,
            graphs={k: g.signature for k, g in captured.graphs.items()},
            state_aliases=captured.state_aliases,
            non_persistent_buffers=captured.non_persistent_buffers,
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
        )
        writer.write_manifest(manifest)
        if captured.subclasses is None:  # a subclass bundle loads only with classes the caller trusts
            if on_phase:
                on_phase("replay")
            from aotc.parity import replay_fresh

            replay_fresh(root, type(module).__name__)
        if captured.small_sizes:
            if on_phase:
                on_phase("sizes")
            from aotc.size_check import check_small_sizes

            flat = pytree.tree_leaves((args, kwargs))
            metadata = check_small_sizes(root, metadata, captured.small_sizes, module, flat, captured.in_spec, names,
                                         mode, loss, captured.training)
            writer.write_json(METADATA, metadata, "metadata")
            writer.write_manifest(manifest)
    return Bundle.open(out)


def _dumps(spec) -> str:
    return pytree.treespec_dumps(spec)
