"""The library API behind the CLI: `export` (and, later, `compile` and `load`)."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from aotc._torch_compat import pytree
from aotc.bundle.files import Bundle, check_target, check_writable
from aotc.bundle.schema import Metadata, ModelInfo
from aotc.capture import MODES, Capture, CaptureOptions, capture_call
from aotc.capture.breaks import describe, report
from aotc.capture.inputs import BoundCall, bind_call
from aotc.capture.module_copy import copy_module
from aotc.capture.optimizer_step import fuse_optimizer
from aotc.contract import optimizers
from aotc.contract.call_inputs import unwrap
from aotc.contract.randomness import callers_random_state_kept
from aotc.errors import AotcError, CaptureError, GraphBreakError, RangeNarrowedWarning
from aotc.export_writer import Check, Contents, PhaseCallback, write_bundle
from aotc.sources.model_file import FunctionModule
from aotc.tools.size_check import check_small_sizes
from aotc.tools.verify import replay_fresh


def mode_for_graphs(graphs: Sequence[str]) -> str:
    wanted = tuple(graphs)
    for mode, kinds in MODES.items():
        if wanted == kinds or (set(wanted) == set(kinds) and len(wanted) == len(kinds)):
            return mode
    raise AotcError(
        f"graphs={wanted!r} is not a graph set aotc captures; use one of "
        + ", ".join(repr(k) for k in MODES.values())
    )


@dataclass(frozen=True)
class ExportOptions:
    """How `export` captures and writes, beside what it captures (graphs, loss, dynamic
    shapes, optimizer): the partitioner of forward+backward graphs, train-mode capture of
    an inference graph, replacing an existing bundle, the model's name, source file,
    checkpoint and task as the manifest records them, files copied in, and a callback
    told each phase ("capture", "write", "replay", "sizes") as it starts."""

    partitioner: str = "min-cut"
    train: bool = False
    force: bool = False
    name: str | None = None
    source: str | None = None
    checkpoint: str | None = None
    task: str | None = None
    assets: dict[str, Path] | None = None
    on_phase: PhaseCallback | None = None


@callers_random_state_kept()
def export(
    model: torch.nn.Module | Callable[..., Any],
    example_inputs: Any,
    out: str | Path,
    graphs: Sequence[str] = ("inference",),
    loss: Callable[..., torch.Tensor] | None = None,
    dynamic_shapes: Any = None,
    *,
    loss_inputs: Sequence[Any] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    options: ExportOptions | None = None,
    **settings: Any,
) -> Bundle:
    """Capture `model` on `example_inputs` and write a bundle to `out`.

    `graphs` is ("inference",), ("joint",) or ("forward", "backward"); a joint graph
    needs `loss(outputs, *inputs)`, or with `loss_inputs` (targets, labels: inputs the
    model does not take) `loss(outputs, *loss_inputs)`, as in `loss_fn(model(x), y)`; the
    bundle's `train_step` then takes the model's inputs followed by the loss inputs,
    `train_step(x, y)`. A joint graph can carry `optimizer` (a
    torch.optim.SGD or AdamW over the model's parameters, see aotc.contract.optimizers): then
    `train_step` runs loss, gradients and the update in one graph, as
    `loss.backward(); optimizer.step(); optimizer.zero_grad()`. `assets` (path in the bundle -> file) are
    copied in as they are, e.g. a tokenizer's files. The write is atomic: `out` is replaced
    only by a complete bundle, and only with `force=True`.

    `options` (ExportOptions) says how to capture and write; its fields can be given as
    keywords instead (`force=True`, `train=True`, `name=...`), each overriding `options`.
    """
    o = _options(options, settings)
    out = Path(out)
    check_target(out, o.force)  # fail before seconds of tracing, not after
    check_writable(out)
    module = model if isinstance(model, torch.nn.Module) else FunctionModule(model)
    mode = mode_for_graphs(graphs)
    # the one place the user's inputs are read: from here on every flat input is a tensor,
    # and the rest are constants or symbolic ints of the call (aotc.contract.call_inputs)
    call = bind_call(module, example_inputs, mode, loss, loss_inputs, dynamic_shapes)
    fused = None
    if optimizer is not None:  # refused before seconds of tracing

        if mode != "joint":
            raise AotcError("optimizer= needs a joint graph (graphs=(\"joint\",)): the update runs after the "
                            "gradients inside it.")
        info = optimizers.describe(optimizer, module)
        fused = (info, optimizers.initial_state(info, optimizer, module))
    if o.on_phase:
        o.on_phase("capture")
    try:
        captured = capture_call(module, call, CaptureOptions(mode=mode, partitioner=o.partitioner, train=o.train))
    except CaptureError as e:
        if e.__cause__ is None or isinstance(e, GraphBreakError):
            raise  # aotc's own refusal, which says what to do
        raise _with_break_report(e, module, call) from e.__cause__
    if fused is not None:
        captured = _with_optimizer(captured, *fused)
    for line in captured.narrowed:
        warnings.warn(line, RangeNarrowedWarning, stacklevel=2)
    info = ModelInfo(
        name=o.name or type(module).__name__.lower(),
        source=o.source,
        class_name=type(module).__name__,
        training=captured.training,
        checkpoint=o.checkpoint,
        num_parameters=sum(p.numel() for p in module.parameters()),
        task=o.task,
    )
    return write_bundle(captured, module, call, out, Contents(mode, info, call.loss, o.assets), force=o.force,
                        on_phase=o.on_phase, check=export_checks(captured, module, call, mode, o.on_phase))


def _options(options: ExportOptions | None, settings: dict[str, Any]) -> ExportOptions:
    """`options` with the keywords given to export in place of its fields."""
    names = [f.name for f in dataclasses.fields(ExportOptions)]
    unknown = sorted(set(settings) - set(names))
    if unknown:
        raise TypeError(f"export() got an unexpected keyword argument {unknown[0]!r}; it takes graphs, loss, "
                        f"dynamic_shapes, optimizer, options, and ExportOptions' fields: {', '.join(names)}.")
    return dataclasses.replace(options or ExportOptions(), **settings)


def export_checks(captured: Capture, module: torch.nn.Module, call: BoundCall, mode: str,
                  on_phase: PhaseCallback | None = None) -> Check:
    """What export checks on the bundle it wrote, before the bundle takes its place: run
    on fx with the example inputs, it gives eager's results (else CaptureError), and the
    small sizes of its dynamic dims replay as eager (the metadata's ranges start where
    they do)."""

    def check(root: Path, metadata: Metadata) -> Metadata:
        if captured.subclasses is None:  # a subclass bundle loads only with classes the caller trusts
            if on_phase:
                on_phase("replay")
            replay_fresh(root, type(module).__name__)
        if not captured.small_sizes:
            return metadata
        if on_phase:
            on_phase("sizes")
        names = [u.name for u in captured.user_inputs]
        return check_small_sizes(root, metadata, captured.small_sizes, module,
                                 pytree.tree_leaves((call.args, call.kwargs)), captured.in_spec, names, mode,
                                 call.loss, captured.training)

    return check


def _with_optimizer(captured: Capture, info, state: dict) -> Capture:

    if captured.subclasses is not None:
        raise AotcError("a joint graph over tensor-subclass parameters cannot carry its optimizer yet; export "
                        "without optimizer= and call optimizer.step() after train_step.")
    graphs = {"joint": fuse_optimizer(captured.graphs["joint"], info, state)}
    return dataclasses.replace(captured, graphs=graphs, optimizer=info, optimizer_state=state)


def _with_break_report(error: CaptureError, module: torch.nn.Module, call: BoundCall) -> CaptureError:
    """torch's failure to capture `module`, with every place that cannot be captured
    (aotc.capture.breaks) when Dynamo finds them; else the error as it was."""

    with torch.no_grad():
        try:
            breaks = report(copy_module(module), *unwrap((call.args, call.kwargs)))
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
