"""What a bundle holds, as plain data: the model of `aotc inspect` and export summaries.

Everything here reads JSON and text only; no graph is loaded and nothing is run.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from aotc.bundle.archives import check_safetensors
from aotc.bundle.cpp_support import cpp_graphs
from aotc.bundle.files import WEIGHTS, Bundle
from aotc.bundle.schema import to_json
from aotc.contract.subclasses import inner_names
from aotc.profiles import bundle_dims

_OP_CALL = re.compile(r"torch\.ops\.([\w]+)\.([\w]+)\.([\w]+)\(")


def op_histogram(code: str) -> dict[str, int]:
    """Count of each operator called in a graph's readable code, most frequent first."""
    counts = Counter(f"{ns}.{op}.{overload}" for ns, op, overload in _OP_CALL.findall(code))
    return dict(counts.most_common())


def constants(bundle: Bundle) -> list[dict[str, Any]]:
    """Tensors made inside forward that the graphs take as inputs (stored with the weights)."""
    slots = {s.target: kind for kind, sig in bundle.signature.graphs.items() for s in sig.inputs if s.role == "constant"}
    if not slots:
        return []

    header = check_safetensors(bundle.path / WEIGHTS)  # dtypes and shapes, without reading tensors
    return [
        {"name": name, "graph": kind, "dtype": header.get(name, {}).get("dtype"), "shape": header.get(name, {}).get("shape")}
        for name, kind in slots.items()
    ]


def subclasses(bundle: Bundle) -> list[dict[str, Any]]:
    """Every tensor that was a subclass in the eager model: where, its class, and the
    inner tensors the graphs take (dtype and shape from the weights' header or metadata)."""
    info = bundle.metadata.subclasses
    if info is None:
        return []

    header = check_safetensors(bundle.path / WEIGHTS)
    user = {u.name: t for u, t in zip(bundle.signature.user_inputs, bundle.metadata.user_inputs)}
    rows = []
    kinds = {i.name: i.kind for program in bundle.metadata.programs.values() for i in program.inputs}
    groups = [(kinds.get(inner_names(fqn, meta)[0], "parameter"), fqn, fqn, meta) for fqn, meta in info.state.items()]
    groups += [("input", info.input_names[int(k)], info.input_names[int(k)], meta) for k, meta in info.inputs.items()]
    groups += [("output", f"output {k}", None, meta) for k, meta in info.outputs.items()]
    for where, name, prefix, meta in groups:
        inner = []
        for inner_name in inner_names(prefix or name, meta):
            if where in ("parameter", "buffer"):
                found = header.get(inner_name, {})
                dtype, shape = found.get("dtype"), found.get("shape")
            elif where == "input":
                t = user.get(inner_name)
                dtype, shape = (t.dtype, t.shape) if t else (None, None)
            else:
                dtype = shape = None
            inner.append({"name": inner_name, "dtype": dtype, "shape": shape})
        rows.append({"where": where, "name": name, "class": meta.class_name, "dtype": meta.dtype,
                     "shape": meta.shape, "requires_grad": meta.requires_grad, "context": meta.context,
                     "inner": inner})
    return rows


def describe_regions(rb) -> dict[str, Any]:
    """A regional bundle (aotc.runtime.regional.RegionalBundle): its regions, their groups, what
    each group's bundle holds, and the graph-break report."""
    m = rb.manifest
    members = Counter(r.group for r in m.regions)
    size = sum(f.stat().st_size for f in rb.path.rglob("*") if f.is_file())
    return {
        "bundle": str(rb.path),
        "model": m.model.name,
        "source": m.model.source,
        "regions": [
            {"fqn": r.fqn, "class": r.class_name, "group": r.group, "graphs": list(m.graph_kinds),
             "parameters": sum(_numel(s.shape) for s in r.parameters.values())}
            for r in m.regions
        ],
        "groups": [
            {"name": g.name, "path": g.path, "first": g.first, "regions": members[g.name],
             "compiled": sorted({f.path for f in rb.groups[g.name].manifest.files if f.kind == "compiled"})}
            for g in m.groups
        ],
        "breaks": [to_json(b) for b in m.breaks],
        "size_bytes": size,
        "manifest": to_json(m),
    }


def _numel(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def describe(bundle: Bundle) -> dict[str, Any]:
    """The whole of a bundle's manifest, signatures and metadata, plus derived facts."""
    m = bundle.manifest
    sizes: Counter[str] = Counter()
    for f in m.files:
        sizes[f.kind] += f.size
    graphs = {}
    for kind in m.graph_kinds:
        ops = op_histogram(bundle.graph_code(kind))
        sig = bundle.signature.graphs[kind]
        graphs[kind] = {
            "num_nodes": sum(ops.values()),
            "num_inputs": len(sig.inputs),
            "num_outputs": len(sig.outputs),
            "ops": ops,
            "signature": to_json(sig),
        }
    return {
        "path": str(bundle.path),
        "manifest": to_json(m),
        "size": {"total": sum(sizes.values()), **dict(sizes)},
        "user_inputs": to_json(bundle.signature.user_inputs),
        "constant_inputs": to_json(bundle.signature.constant_inputs),
        "graphs": graphs,
        "constants": constants(bundle),
        "subclasses": subclasses(bundle),
        "metadata": to_json(bundle.metadata),
        "cpp": cpp_graphs(bundle),
        "dims": {d.symbol: d.label for d in bundle_dims(bundle)},  # dynamic dims, as --profile names them
    }
