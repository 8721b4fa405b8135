"""Artifact formats. Each module here exposes the same functions:

    FORMAT: str                                     the name used on the command line
    load_graph(bundle, kind, device) -> callable    a graph as a function of flat tensors

and, by what they produce: `write(capture, root)` (fx: written at export),
`compile_graph(program, example_inputs, path)` (aoti: compiled from the fx graph) or
`export_graph(bundle, kind, path)` (onnx: translated from the fx graph).

Adding a format means adding one module and one line in `EXPORTERS`.
"""

from __future__ import annotations

from aotc.exporters import aoti, fx, onnx

EXPORTERS = {fx.FORMAT: fx, aoti.FORMAT: aoti, onnx.FORMAT: onnx}

__all__ = ["EXPORTERS"]
