"""The `onnx` format: a bundle graph as an ONNX model, run by onnxruntime.

`onnx/<kind>.onnx` comes from `torch.onnx.export(..., dynamo=True)` of the bundle's flat,
functional graph, so input and buffer mutations are extra ONNX outputs named as in the
bundle's signature (`mutated:<name>`), and the runtime's epilogue applies them exactly as
for the other backends. Dynamic dims of the graph become ONNX dynamic axes. Opset,
inputs and outputs are recorded in the manifest, so `aotc inspect` shows them without
reading the model.

A bundle graph is lowered for CPU, and a few of its CPU kernels have no ONNX translation
although the op they were lowered from has one (an LSTM becomes oneDNN's
`mkldnn_rnn_layer`). Before export such ops are put back (`onnx_ready`); the ONNX model is
still checked against the bundle graph itself.
"""

from __future__ import annotations

import logging
import re
import warnings
from pathlib import Path

import torch

from aotc import _torch_compat as tc
from aotc.bundle.files import check_hash
from aotc.contract.randomness import random_ops
from aotc.errors import AotcError, BundleError
from aotc.exporters.formats import BuildOptions, Built, add_artifacts, built_only
from aotc.exporters.graph_inputs import example_graph_inputs
from aotc.exporters.onnx_translations import onnx_ready, optimized, translations
from aotc.optional_deps import require

FORMAT = "onnx"
FILE_KIND = "onnx"
DEFAULT_OPSET = 18


def artifact_path(kind: str, device: str = "cpu") -> str:
    """One ONNX model per graph, for any device (onnxruntime picks the provider)."""
    return f"onnx/{kind}.onnx"


def build(bundle, kind: str, device: torch.device, target: Path, options: BuildOptions) -> Built:
    return Built(export_graph(bundle, kind, target, options.opset))


def onnx_names(slot_names: list[str]) -> list[str]:
    """Slot names as ONNX value names: [A-Za-z0-9_] only, and unique (a tied weight is
    one name passed twice)."""
    names: list[str] = []
    for slot in slot_names:
        base = name = re.sub(r"[^A-Za-z0-9_]", "_", slot)
        k = 1
        while name in names:
            k += 1
            name = f"{base}_{k}"
        names.append(name)
    return names


def export_graph(bundle, kind: str, target: Path, opset: int | None = None) -> dict[str, str]:
    """Write the bundle's `kind` graph as ONNX to `target`; returns the manifest build info."""

    for module in ("onnx", "onnxscript", "onnxruntime"):
        require(module, "onnx", "Exporting to ONNX")

    program = bundle.exported_program(kind)
    drawn = random_ops(program.graph)
    if drawn:
        # onnxruntime draws its own random numbers; comparing one run could match by chance
        raise AotcError(
            f"The {kind} graph draws random numbers ({', '.join(drawn)}); onnxruntime would draw "
            "others, so its results would not be eager's. Use the fx or aoti backend for this graph "
            "(they replay torch's random stream), or make the model deterministic (e.g. eval-mode dropout)."
        )
    # torch.onnx lowers some complex computations (FNet's Fourier transform then `.real`) and
    # fails on others (complex rotary products); export's check catches a wrong lowering
    complex_ops = sorted({str(n.target) for n in program.graph.nodes
                          if n.op == "call_function" and _is_complex(n.meta.get("val"))})
    sig = bundle.signature.graphs[kind]
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
    returned = list(program.graph.output_node().args[0])
    complex_io = [slot.name for slot, n in zip(sig.inputs, placeholders) if _is_complex(n.meta.get("val"))]
    complex_io += [slot.name for slot, v in zip(sig.outputs, returned)
                   if _is_complex(getattr(v, "meta", {}).get("val"))]
    complex_io = list(dict.fromkeys(complex_io))  # a constant used twice is one slot name
    if complex_io:
        raise AotcError(
            f"The {kind} graph takes or returns complex tensors ({', '.join(complex_io[:4])}"
            f"{', ...' if len(complex_io) > 4 else ''}), which ONNX has no type for. Use the fx or aoti "
            "backend for this graph."
        )
    example = example_graph_inputs(bundle, kind, torch.device("cpu"))
    inputs = onnx_names([s.name for s in sig.inputs])
    outputs = onnx_names([s.name for s in sig.outputs])
    opset = opset or DEFAULT_OPSET
    for_onnx = program
    # torch.onnx logs a warning per torchvision op it skips when torchvision is absent
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for_onnx = onnx_ready(program)
            exported = torch.onnx.export(
                for_onnx, tuple(example), dynamo=True, opset_version=opset, input_names=inputs,
                output_names=outputs, verbose=False, report=False, custom_translation_table=translations(for_onnx),
                optimize=False,  # see optimized
            )
            optimized(exported)
    except Exception as e:
        translated = {str(op) for op in translations(for_onnx)}
        unsupported = [op for op in tc.onnx_unsupported_ops(for_onnx.graph) if op not in translated]
        detail = f"operators without an ONNX translation: {', '.join(unsupported)}" if unsupported else (
            f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        )
        if complex_ops:
            raise AotcError(
                f"The {kind} graph computes with complex tensors ({', '.join(complex_ops[:4])}"
                f"{', ...' if len(complex_ops) > 4 else ''}), which ONNX has no type for, and torch.onnx "
                f"could not lower them ({detail}). Use the fx or aoti backend for this graph."
            ) from e
        raise AotcError(f"The {kind} graph cannot be exported to ONNX opset {opset}; {detail}.") from e
    target.parent.mkdir(parents=True, exist_ok=True)
    exported.save(str(target))
    _check_against_graph(target, program, example, sig, kind, bundle.metadata.programs.get(kind))
    return {"opset": str(opset), "inputs": ",".join(inputs), "outputs": ",".join(outputs),
            "torch": torch.__version__}


def _is_complex(value) -> bool:
    return isinstance(value, torch.Tensor) and value.is_complex()


def _check_against_graph(path: Path, program, example: list, sig, kind: str, meta=None) -> None:
    """Refuse an ONNX model that onnxruntime does not run like the graph it came from
    (ONNX's training-mode batch norm and random ops differ from torch's, for example)."""
    import onnxruntime as ort  # optional (aotc[onnx]): only when checking an ONNX model

    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime's own exception classes: torch.onnx wrote a model it rejects
        path.unlink()
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise AotcError(f"onnxruntime cannot load the ONNX model torch.onnx wrote for the {kind} graph "
                        f"({type(e).__name__}: {first}); use the fx or aoti backend for this graph.") from e
    got = OnnxGraph(session, output_layouts(program))(*example)
    with torch.no_grad():
        expected = program.graph_module(*example)
    wrong = []
    for slot, a, b in zip(sig.outputs, got, expected):
        if a.shape != b.shape or not torch.allclose(a.to(b.dtype), b, rtol=1e-3, atol=1e-4):
            err = (a.double() - b.double()).abs().max().item() if a.shape == b.shape else float("nan")
            wrong.append(f"{slot.name} (max abs error {err:.3g})")
        elif isinstance(b, torch.Tensor) and b.numel() > 1 and a.stride() != b.stride() and slot.name in _view_bases(sig, meta):
            wrong.append(f"{slot.name} (laid out with strides {a.stride()}, the graph's are {b.stride()}; "
                         "outputs that view it would read other elements)")
    if wrong:
        path.unlink()
        raise AotcError(
            f"onnxruntime does not reproduce the {kind} graph: {', '.join(wrong[:5])}"
            + (f" and {len(wrong) - 5} more" if len(wrong) > 5 else "")
            + ". ONNX translates some torch semantics differently (training-mode batch norm, random "
            "ops); use the fx or aoti backend for this graph."
        )
    shared = _sharing_onnx_loses(meta, sig, list(expected))
    if shared:
        path.unlink()
        raise AotcError(
            f"outputs {' and '.join(shared)} of the {kind} graph share memory (as views of one "
            "tensor the graph does not return), and onnxruntime returns each as a copy of its own, "
            "so writing to one would not show in the other as it does in eager. Use the fx or aoti "
            "backend for this graph."
        )


def _view_bases(sig, meta) -> set[str]:
    """Names of the graph outputs the epilogue rebuilds other outputs as views of."""
    if meta is None:
        return set()
    user = {s.index: s.name for s in sig.outputs if s.role == "user_output"}
    bases = {s.name for s in sig.outputs if s.role == "intermediate_base"}
    for o in meta.outputs:
        if o.output_type == "alias_of_intermediate_base_is_user_output" and o.base_idx in user:
            bases.add(user[o.base_idx])
        if o.view_of_output in user:
            bases.add(user[o.view_of_output])
    return bases


def _sharing_onnx_loses(meta, sig, values: list) -> list[str]:
    """A pair of user outputs that share memory in the graph but that the runtime's
    epilogue would not rebuild as sharing from ONNX's separate copies; empty if none."""
    if meta is None:
        return []
    rebuilt = {"alias_of_input", "is_input", "alias_of_intermediate", "alias_of_intermediate_save_as_output",
               "alias_of_intermediate_base_is_user_output"}
    users = [(s.index, v) for s, v in zip(sig.outputs, values) if s.role == "user_output" and isinstance(v, torch.Tensor)]
    for a, (i, x) in enumerate(users):
        for j, y in users[a + 1:]:
            if x.untyped_storage().data_ptr() != y.untyped_storage().data_ptr() or x.numel() == 0:
                continue
            oi, oj = meta.outputs[i], meta.outputs[j]
            linked = {oi.same_as_output, oi.view_of_output} & {j} or {oj.same_as_output, oj.view_of_output} & {i} or (
                oj.output_type == "alias_of_intermediate_base_is_user_output" and oj.base_idx == i
            ) or (oi.output_type == "alias_of_intermediate_base_is_user_output" and oi.base_idx == j)
            if not linked and not (oi.output_type in rebuilt and oj.output_type in rebuilt):
                return [f"output[{i}]", f"output[{j}]"]
    return []


# How to lay out one ONNX output as the graph lays it out: its strides (static shapes), the
# order of its dims in memory (dynamic shapes, dense), or None (as onnxruntime gives it).
Layout = tuple[int, ...] | list[int] | None


class OnnxGraph:
    """An onnxruntime session as a callable over flat tensors, returning a list.

    ONNX has no strides, and onnxruntime returns every output contiguous. Each output is
    laid out as the graph lays it out (the epilogue rebuilds views from an output's
    strides, and a transposed output read as contiguous would be other values): static
    outputs get the graph's strides, dynamic dense ones the graph's order of dims.
    """

    def __init__(self, session, layouts: list[Layout]):
        self._session = session
        self._inputs = [i.name for i in session.get_inputs()]
        self._layouts = layouts
        # numpy has no bfloat16: such a graph goes through onnxruntime's OrtValues instead
        self._bfloat16 = any(v.type == "tensor(bfloat16)" for v in [*session.get_inputs(), *session.get_outputs()])

    def __call__(self, *args):
        tensors = [a.detach().contiguous().cpu() for a in args]
        if self._bfloat16:
            outs = self._run_ort_values(tensors)
        else:
            feeds = {name: t.numpy() for name, t in zip(self._inputs, tensors)}
            outs = [torch.from_numpy(o) for o in self._session.run(None, feeds)]
        for i, layout in enumerate(self._layouts):
            if isinstance(layout, tuple) and outs[i].stride() != layout:
                outs[i] = torch.empty_strided(outs[i].shape, layout, dtype=outs[i].dtype).copy_(outs[i])
            elif isinstance(layout, list) and outs[i].dim() == len(layout) and layout != sorted(layout):
                outs[i] = torch.empty_permuted(outs[i].shape, layout, dtype=outs[i].dtype).copy_(outs[i])
        return outs

    def _run_ort_values(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        import onnxruntime as ort

        bfloat16 = 16  # onnx.TensorProto.BFLOAT16: its bits, as numpy's uint16
        feeds = {name: ort.OrtValue.ortvalue_from_numpy_with_onnx_type(t.view(torch.uint16).numpy(), bfloat16)
                 if t.dtype == torch.bfloat16 else ort.OrtValue.ortvalue_from_numpy(t.numpy())
                 for name, t in zip(self._inputs, tensors)}
        outs = self._session.run_with_ort_values(None, feeds)
        return [torch.from_dlpack(o) if o.data_type() == "tensor(bfloat16)" else torch.from_numpy(o.numpy())
                for o in outs]


def _dim_order(value: torch.Tensor) -> list[int] | None:
    """The graph's order of dims in memory for a dynamic output (outermost first), from
    the strides at the sizes it was traced with; None when it is not a dense layout."""
    hinted = [s.node.hint if isinstance(s, torch.SymInt) else s for s in value.stride()]
    sizes = [s.node.hint if isinstance(s, torch.SymInt) else s for s in value.shape]
    if None in hinted or None in sizes:
        return None
    order = sorted(range(len(hinted)), key=lambda d: -hinted[d])
    expected = 1
    for d in reversed(order):
        if sizes[d] != 1 and hinted[d] != expected:
            return None
        expected *= sizes[d]
    return order


def output_layouts(program) -> list[Layout]:
    """The layout of each of `program`'s outputs (see OnnxGraph)."""
    vals = [n.meta.get("val") for n in program.graph.find_nodes(op="output")[0].args[0]]
    layouts: list[Layout] = []
    for v in vals:
        if not isinstance(v, torch.Tensor):
            layouts.append(None)
        elif all(isinstance(s, int) for s in (*v.shape, *v.stride())):
            layouts.append(tuple(v.stride()))
        else:
            layouts.append(_dim_order(v))
    return layouts


def load_graph(bundle, kind: str, device: torch.device) -> OnnxGraph:
    rel = artifact_path(kind)
    if bundle.manifest.file(rel) is None:
        raise BundleError(
            f"Bundle '{bundle.path}' has no ONNX {kind} graph. Run: aotc compile {bundle.path} --onnx"
        )

    ort = require("onnxruntime", "onnx", "backend='onnx'")
    providers = ["CPUExecutionProvider"]
    if device.type == "cuda":
        if "CUDAExecutionProvider" not in ort.get_available_providers():
            raise BundleError("onnxruntime has no CUDA execution provider here; use device='cpu' for backend='onnx'.")
        providers.insert(0, "CUDAExecutionProvider")
    check_hash(bundle.path, bundle.manifest.file(rel))
    try:
        session = ort.InferenceSession(str(bundle.path / rel), providers=providers)
    except Exception as e:  # onnxruntime's own exception classes (InvalidProtobuf, Fail, ...)
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise BundleError(f"'{bundle.path / rel}' is not an ONNX model onnxruntime can load "
                          f"({type(e).__name__}: {first}).") from e

    return OnnxGraph(session, output_layouts(bundle.exported_program(kind)))


def write(capture, writer) -> None:
    built_only(FORMAT)


def has_artifacts(bundle, device: torch.device) -> bool:
    return all(bundle.manifest.file(artifact_path(k)) is not None for k in bundle.graph_kinds)


def add_to_bundle(path, kinds: list[str] | None = None, opset: int | None = None):
    """Export the bundle's graphs (default: all) to ONNX, in place; returns the new Bundle."""

    return add_artifacts(path, FORMAT, ("cpu",), kinds, BuildOptions(opset=opset))
