"""What a bundle holds, as plain data: the model of `aotc inspect` and export summaries.

Everything here reads JSON and text only; no graph is loaded and nothing is run.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from aotc.bundle import Bundle
from aotc.schema import to_json

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
    from aotc.archives import check_safetensors
    from aotc.bundle import WEIGHTS

    header = check_safetensors(bundle.path / WEIGHTS)  # dtypes and shapes, without reading tensors
    return [
        {"name": name, "graph": kind, "dtype": header.get(name, {}).get("dtype"), "shape": header.get(name, {}).get("shape")}
        for name, kind in slots.items()
    ]


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
        "graphs": graphs,
        "constants": constants(bundle),
        "metadata": to_json(bundle.metadata),
    }
