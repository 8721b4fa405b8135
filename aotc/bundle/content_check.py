"""A bundle's files checked against its JSON when they are read: each loaded graph takes
and returns what signature.json says, with metadata.json's dtypes and ranks; the weights
and the optimizer state hold every tensor the graphs take, shaped as recorded. A
mismatch is a BundleError naming the file and the entry (aotc.bundle.check checks the
JSON itself, before any of this).
"""

from __future__ import annotations

from aotc.bundle.check import Where


def check_program(bundle, kind: str, program) -> None:
    """The loaded ExportedProgram takes and returns what signature.json says, with the
    dtypes and ranks metadata.json records."""
    w = Where(bundle.path)
    graph = program.graph_module.graph
    placeholders = graph.find_nodes(op="placeholder")
    sig = bundle.signature.graphs[kind]
    (output,) = graph.find_nodes(op="output") or [None]
    returned = output.args[0] if output is not None else None
    if len(placeholders) != len(sig.inputs) or not isinstance(returned, (tuple, list)) or len(returned) != len(sig.outputs):
        w.fail(f"graphs/{kind}.pt2", "graph", f"takes {len(placeholders)} inputs and returns "
               f"{len(returned) if isinstance(returned, (tuple, list)) else '?'}; signature.json says "
               f"{len(sig.inputs)} and {len(sig.outputs)}")
    meta = bundle.metadata.programs.get(kind)
    if meta is None:
        return
    for i, (node, info) in enumerate(zip(placeholders, meta.inputs)):
        val = node.meta.get("val")
        if info.tensor is None or val is None or not hasattr(val, "dtype"):
            continue
        if str(val.dtype).removeprefix("torch.") != info.tensor.dtype or val.dim() != len(info.tensor.shape):
            w.fail(f"graphs/{kind}.pt2", f"input {i} ({info.name})",
                   f"{val.dtype} {val.dim()}-d, metadata.json says {info.tensor.dtype} {len(info.tensor.shape)}-d")


def check_optimizer_state(bundle, tensors: dict) -> None:
    """optimizer.safetensors holds every state tensor the joint graph takes, each with
    its parameter's shape and dtype (a step count: a 0-d float32)."""
    w = Where(bundle.path)
    params = {i.name: i.tensor for p in bundle.metadata.programs.values() for i in p.inputs if i.kind == "parameter"}
    for s in bundle.signature.graphs["joint"].inputs:
        if s.role != "optimizer_state":
            continue
        t = tensors.get(s.target)
        fqn, _, key = str(s.target).rpartition("/")
        if t is None:
            w.fail("optimizer.safetensors", str(s.target), "missing; the joint graph takes it")
        m = params.get(fqn)
        want = ("float32", []) if key == "step" else (m.dtype, m.shape) if m is not None else None
        if want is None or (str(t.dtype).removeprefix("torch."), list(t.shape)) != want:
            w.fail("optimizer.safetensors", str(s.target), f"{t.dtype} {list(t.shape)}, the joint graph takes {want}")


def check_weights(bundle, tensors: dict) -> None:
    """weights.safetensors holds every parameter, buffer and constant the graphs take,
    each with the dtype and shape metadata.json records."""
    w = Where(bundle.path)
    for kind, program in bundle.metadata.programs.items():
        for info in program.inputs:
            if info.kind not in ("parameter", "buffer"):
                continue
            t = tensors.get(info.name)
            if t is None:
                w.fail("weights.safetensors", info.name, f"missing; the {kind} graph takes it")
            m = info.tensor
            if m is not None and (str(t.dtype).removeprefix("torch.") != m.dtype or list(t.shape) != m.shape):
                w.fail("weights.safetensors", info.name, f"{t.dtype} {list(t.shape)}, metadata.json says "
                       f"{m.dtype} {m.shape}")
    for kind, sig in bundle.signature.graphs.items():
        for s in sig.inputs:
            if s.role == "constant" and s.target not in tensors:
                w.fail("weights.safetensors", str(s.target), f"missing; the {kind} graph takes it as a constant")
