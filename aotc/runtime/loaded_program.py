"""One captured program of a loaded bundle: where each graph input comes from (a
parameter or buffer of the module, a user input, a synthetic base, a subclass's inner
tensor), its epilogue, guards and input checks, built once at load.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from aotc.bundle.schema import GraphSignature, ProgramMeta
from aotc.contract.aliasing import synthetic_base
from aotc.errors import InputError
from aotc.runtime.epilogue import Epilogue
from aotc.runtime.inputs import build_guard
from aotc.runtime.state import slot_getter
from aotc.runtime.subclasses import SubclassLayer

Graph = Callable[..., tuple]


def with_constants(graph: Graph, signature: GraphSignature, stored: dict, device: torch.device) -> Graph:
    """`graph`, taking its lifted constants (its last inputs) from the bundle's weights."""
    constants = [stored[s.target].to(device) for s in signature.inputs if s.role == "constant"]
    if not constants:
        return graph
    if hasattr(graph, "at"):  # shape profiles (exporters/aoti_profiles.py): each package takes them
        return graph.map(lambda g: with_constants(g, signature, stored, device))
    return lambda *args: graph(*args, *constants)


class Program:
    """One captured program (inference, forward+backward, or joint) ready to call."""

    def __init__(self, root: nn.Module, kind: str, signature: GraphSignature, meta: ProgramMeta,
                 training: bool, user_inputs, graph: Graph, user_meta, subclasses: SubclassLayer | None = None):
        self.kind = kind
        self.signature = signature
        self.graph = graph
        # Where each graph input comes from: ("state", table, name) or ("user", index).
        self.sources = []
        for slot in signature.inputs:
            if slot.role in ("constant", "optimizer_state", "hyperparameter"):
                continue  # passed by the graph wrapper (with_constants) and train_step's optimizer
            if subclasses is not None and slot.target in subclasses.owner:
                self.sources.append(("inner", slot.target, None))  # a subclass's inner tensor
            elif slot.role in ("parameter", "buffer"):
                self.sources.append(("state", *slot_getter(root, slot.target)))
            elif slot.role == "synthetic_base":
                self.sources.append(("base", slot.index, None))
            else:
                self.sources.append(("user", slot.index, None))
        self.epilogue = Epilogue(meta, signature, training)
        # user inputs this program fixes where the bundle's inputs are dynamic (a decode
        # graph takes one token; the prefill graph of the same bundle, any number)
        shapes = {i.name: i.tensor.shape for i in meta.inputs if i.kind == "user_input" and i.tensor
                  and not i.tensor.dynamic_dims}
        self.static_shapes = {
            k: (u.name, torch.Size(shapes[u.name])) for k, u in enumerate(user_inputs)
            if u.name in shapes and user_meta[k].dynamic_dims
        }
        self.guard = build_guard(meta, user_inputs)
        self.requires_grad = [i.requires_grad for i in meta.inputs]
        # user inputs the graphs were traced without a gradient for (forward+backward graphs)
        self.gradless_inputs = [
            slot.index for slot, info in zip([s for s in signature.inputs if s.role != "constant"], meta.inputs)
            if slot.role == "user_input" and not info.requires_grad
        ]
        self.set_requires_grad = meta.inputs_set_requires_grad
        # an inference graph called under grad mode: the outputs eager gives history
        self.inference = kind in ("inference", "prefill", "decode")
        self.with_history = meta.outputs_with_history
        self._state = [(table, name) for src, table, name in self.sources if src == "state"]
        self._user = [table for src, table, _ in self.sources if src == "user"]
        # Graph inputs are (state..., user inputs...) in capture order; else gather one by one.
        kinds = [src for src, _, _ in self.sources]
        self._layout_simple = kinds == ["state"] * len(self._state) + ["user"] * len(self._user)
        self._dense_state = subclasses.dense_state if subclasses is not None and "inner" in kinds else None

    def check_static_shapes(self, flat) -> None:
        for k, (name, shape) in self.static_shapes.items():
            if flat[k].shape != shape:
                raise InputError(
                    f"input '{name}' has shape {tuple(flat[k].shape)}; the {self.kind} graph takes "
                    f"{tuple(shape)}."
                )

    def primals(self, flat) -> list:
        if self._layout_simple:
            return [table[name] for table, name in self._state] + [flat[i] for i in self._user]
        dense = self._dense_state() if self._dense_state is not None else {}
        return [
            table[name] if src == "state" else synthetic_base(flat[table]) if src == "base"
            else dense[table] if src == "inner" else flat[table]
            for src, table, name in self.sources
        ]
