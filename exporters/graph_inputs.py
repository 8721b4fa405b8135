"""Example inputs for one graph of a bundle, to compile or translate it with."""

from __future__ import annotations

import torch

from aotc._torch_compat import pytree
from aotc.bundle.files import Bundle
from aotc.contract.aliasing import synthetic_base
from aotc.contract.outputs import load_spec
from aotc.runtime.inputs import random_inputs


def example_graph_inputs(bundle: Bundle, kind: str, device: torch.device, sizes: dict[str, int] | None = None) -> list:
    """Inputs for one graph, shaped like the export's (or with `sizes`: dim symbol -> size):
    weights from the bundle, random user inputs, and for the backward graph real saved
    activations from running the forward."""

    weights = bundle.weights()
    in_spec = load_spec(bundle.signature.in_spec)
    user = pytree.tree_leaves(random_inputs(bundle.metadata, in_spec, seed=0, sizes=sizes))
    # a graph with static user inputs where the bundle's are dynamic (decode) gets them cut to size
    program = bundle.metadata.programs.get("forward" if kind == "backward" else kind)
    fixed = {i.name: i.tensor.shape for i in program.inputs if i.kind == "user_input" and i.tensor
             and not i.tensor.dynamic_dims} if program else {}
    for k, u in enumerate(bundle.signature.user_inputs):
        if u.name in fixed and list(user[k].shape) != fixed[u.name]:
            user[k] = user[k][tuple(slice(0, n) for n in fixed[u.name])].clone()

    optimizer = bundle.optimizer_state()  # a joint graph that carries its optimizer
    hyper = bundle.metadata.optimizer.hyperparameters if bundle.metadata.optimizer else {}

    def primals(sig) -> list:
        return [
            weights[s.target] if s.role in ("parameter", "buffer", "constant")
            else synthetic_base(user[s.index]) if s.role == "synthetic_base"
            else optimizer[s.target] if s.role == "optimizer_state"
            else torch.tensor(hyper[s.target], dtype=torch.float64) if s.role == "hyperparameter"
            else user[s.index]
            for s in sig.inputs
        ]

    sig = bundle.signature.graphs[kind]
    if kind != "backward":
        values = primals(sig)
    else:
        fw_sig = bundle.signature.graphs["forward"]
        forward = bundle.exported_program("forward").graph_module
        with torch.no_grad():
            outs = dict(zip([s.name for s in fw_sig.outputs], forward(*primals(fw_sig))))
        values = [
            outs[s.name] if s.role == "saved"
            else weights[s.target] if s.role == "constant"
            else torch.ones(outs[s.target].shape, dtype=outs[s.target].dtype)
            for s in sig.inputs
        ]
    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]
