"""The `fx` format: each captured graph as an ExportedProgram plus its readable code.

`graphs/<kind>.pt2` is written with `torch.export.save` (a JSON graph, no pickled
code); `graphs/<kind>.py` is the same graph as Python for people and diffs, headed by
its signature.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch.export.passes import move_to_device_pass

from aotc.bundle.files import BundleWriter
from aotc.errors import AotcError, CaptureError

if TYPE_CHECKING:
    from aotc.capture import Capture, CapturedGraph

FORMAT = "fx"
FILE_KIND = "graph"


def artifact_path(kind: str, device: str = "cpu") -> str:
    """The graph of every device (moved to the device at load)."""
    return f"graphs/{kind}.pt2"


def has_artifacts(bundle, device) -> bool:
    return True  # every bundle has its fx graphs


def build(bundle, kind: str, device, target: Path, options):

    raise AotcError("fx graphs are written at export, from the captured model; they are not built from a bundle.")


def _code(graph: CapturedGraph) -> str:
    sig = graph.signature
    lines = [f'"""aotc {graph.kind} graph.', "", "Inputs (in order):"]
    lines += [f"  {i:3d}  {s.role:<12} {s.name}" for i, s in enumerate(sig.inputs)]
    lines += ["", "Outputs (in order):"]
    lines += [f"  {i:3d}  {s.role:<17} {s.name}" for i, s in enumerate(sig.outputs)]
    lines += ['"""', ""]
    code = graph.program.graph_module.print_readable(print_output=False, include_stride=False)
    # Drop tracing provenance ("# File: <eval_with_key>...") and the blank lines around it.
    body = [ln for ln in code.splitlines() if ln.strip() and not ln.strip().startswith("# File:")]
    return "\n".join(lines + body) + "\n"


def write(capture: Capture, writer: BundleWriter) -> None:
    for kind, graph in capture.graphs.items():
        pt2 = artifact_path(kind)
        py = f"graphs/{kind}.py"
        # Example inputs would be pickled into the archive; the bundle keeps none. Stack
        # traces name this machine's paths and tracing counters: dropping them keeps the
        # bundle free of local paths and the graph's content stable across exports.
        graph.program.example_inputs = None
        for node in graph.program.graph.nodes:
            node.meta.pop("stack_trace", None)
        try:
            torch.export.save(graph.program, str(writer.path(pt2)))
        except Exception as e:  # torch's serializer: it refuses the same program from torch.export.export
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            raise CaptureError(
                f"torch.export.save cannot write the captured {kind} graph ({type(e).__name__}: {first}); a bundle "
                "holds its graphs as torch.export saves them, and torch.export.save refuses this program (it refuses "
                "the program torch.export.export gives too). Rewrite the part of the model named there."
            ) from e
        writer.path(py).write_text(_code(graph), encoding="utf-8")
        writer.add(pt2, "graph", graph=kind)
        writer.add(py, "graph_code", graph=kind)


def load_graph(bundle, kind: str, device):
    """The graph as a callable over flat tensors, returning a tuple.

    Calls the ExportedProgram's GraphModule directly: aotc's signature layer has already
    checked the inputs, so torch.export's own per-call input checks are skipped.
    """
    program = bundle.load_program(kind)
    if device.type != "cpu":

        program = move_to_device_pass(program, device)
    return program.graph_module
