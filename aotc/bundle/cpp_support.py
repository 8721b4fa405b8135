"""Which graphs of a bundle the C++ runtime (cpp/, `aotc-run`) can run, and on which
devices: what `aotc inspect` reports.

The rules are cpp/src/support.cpp's `BundleData::cpp_refusal`, word for word: the C++
runtime refuses the same graphs, by the same reason, when it loads the bundle
(tests/test_cpp_runtime.py checks the two agree).
"""

from __future__ import annotations

CPP_KINDS = ("inference", "joint", "forward", "backward")


def cpp_refusal(bundle, kind: str) -> str:
    """'' when the C++ runtime runs the bundle's `kind` graph, else why not."""
    meta = bundle.metadata
    if bundle.manifest.generation is not None:
        return "a generation bundle: its decoding loop and KV cache run in Python (aotc generate)"
    if kind not in CPP_KINDS:
        return f"a {kind} graph"
    if meta.subclasses is not None:
        return "tensor subclasses, which only trusted Python classes rebuild"
    ambient = meta.ambient
    if ambient is not None and (ambient.autocast or ambient.torch_function_modes):
        what = "autocast" if ambient.autocast else "torch-function modes"
        return f"captured under {what}, which the C++ runtime does not set"
    if any(u.kind != "tensor" for u in bundle.signature.user_inputs):
        return "an int input, which the Python runtime turns into a tensor"
    program = meta.programs.get("forward" if kind == "backward" else kind)  # a backward graph: its forward's
    if program is None:
        return f"no metadata for the {kind} graph"
    if program.aliased_inputs:
        return "inputs captured as views of one tensor (a synthetic base)"
    if any(i.mutates_storage_metadata for i in program.inputs):
        return "an input whose storage the graph swaps (set_ or a .data assignment)"
    for o in program.outputs:
        if o.constant is not None or o.scalar is not None:
            return "outputs that are not tensors (constants or Python numbers)"
        if o.output_type == "custom_function_view":
            return "outputs of custom autograd.Functions that view an input"
    backward = bundle.signature.graphs.get("backward")
    if kind in ("forward", "backward") and backward is not None:
        user_outputs = {s.name for s in bundle.signature.graphs["forward"].outputs if s.role == "user_output"}
        if any(s.role == "tangent" and s.target not in user_outputs for s in backward.inputs):
            return "a gradient for an input the forward mutates in place, which C++ callers cannot give"
    return ""


def cpp_graphs(bundle) -> dict[str, dict]:
    """Per graph kind: whether C++ runs it ("runs"), why not ("refused"), and the devices
    it is compiled for (C++ runs compiled packages only: none means aotc compile first)."""
    out = {}
    for kind in bundle.graph_kinds:
        devices = sorted({f.device for f in bundle.manifest.files
                          if f.kind == "compiled" and f.graph == kind and f.device})
        out[kind] = {"runs": not cpp_refusal(bundle, kind) and bool(devices), "refused": cpp_refusal(bundle, kind),
                     "devices": devices}
    return out


def describe_cpp(graphs: dict[str, dict]) -> str:
    """One line per graph for `aotc inspect`."""
    parts = []
    for kind, g in graphs.items():
        if g["refused"]:
            parts.append(f"{kind}: no ({g['refused']})")
        elif g["devices"]:
            parts.append(f"{kind}: yes, compiled for {', '.join(g['devices'])}")
        else:
            parts.append(f"{kind}: once compiled (aotc compile)")
    return "; ".join(parts)
