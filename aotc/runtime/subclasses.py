"""Wrapper layer 0: tensor subclasses at the edges of a loaded bundle.

The graphs take and return plain ("dense") tensors: each subclass parameter, buffer,
input and output as its inner tensors (aotc.capture.subclasses). This layer, outermost
as AOTAutograd's subclass wrapper is, turns the caller's subclass inputs into their
inner tensors, the dense outputs back into subclasses, and owns the subclass
parameters and buffers, so `state_dict()` holds them as the eager model's did.

Under autograd two small Functions connect the layers: `Unwrap` hands the graphs a
subclass's inner tensors and turns their gradients back into the subclass's gradient;
`Wrap` does the reverse for outputs. Classes come from aotc.contract.subclasses.resolve, which
imports only trusted ones; a bundle without subclasses never builds this layer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from aotc._torch_compat import pytree
from aotc.bundle.subclasses_schema import Subclasses
from aotc.contract.outputs import load_spec
from aotc.contract.subclasses import Rebuilder, inner_names, resolve
from aotc.errors import GraphRunError, InputError


class Unwrap(torch.autograd.Function):
    """apply(rebuilder, grad_rebuilder, subclass) -> its plain tensors; their gradients
    become its gradient, built by `grad_rebuilder` (as AOTAutograd traced it)."""

    @staticmethod
    def forward(ctx, r: Rebuilder, grad_r: Rebuilder, t: torch.Tensor):
        ctx.r = grad_r
        ctx.meta = [(p.shape, p.dtype, p.device) for p in r.plain(t)]
        # aliases, not the tensors themselves: autograd would otherwise rewrite the
        # history of the parameter's own inner tensors
        return tuple(p.detach() for p in r.plain(t))

    @staticmethod
    def backward(ctx, *grads):
        grads = [g if g is not None else torch.zeros(s, dtype=d, device=dev)
                 for g, (s, d, dev) in zip(grads, ctx.meta)]
        return None, None, ctx.r.build(grads)


class Wrap(torch.autograd.Function):
    """apply(rebuilder, *plain tensors) -> the subclass; its gradient flows to the plain tensors."""

    @staticmethod
    def forward(ctx, r: Rebuilder, *tensors):
        ctx.r = r
        return r.build(list(tensors))

    @staticmethod
    def backward(ctx, grad):
        r = ctx.r
        try:
            r.check(grad, "the gradient of an output")
        except InputError as e:
            raise GraphRunError(f"{e} The backward was traced for gradients like the output (e.g. "
                                "torch.ones_like(output)).") from None
        return None, *r.plain(grad)


class SubclassLayer:
    """Rebuilds the subclasses of one bundle; built once at load."""

    def __init__(self, info: Subclasses, trusted: Iterable[str | type] = ()):
        trusted = list(trusted)
        where = "metadata.json: subclasses"
        self.state = {fqn: resolve(m, trusted, f"{where}.state.{fqn}") for fqn, m in info.state.items()}
        self.state_requires_grad = {fqn: m.requires_grad for fqn, m in info.state.items()}
        self.inner_state = {fqn: inner_names(fqn, m) for fqn, m in info.state.items()}
        self.owner = {name: fqn for fqn, names in self.inner_state.items() for name in names}
        self.inputs = {int(k): resolve(m, trusted, f"{where}.inputs.{k}") for k, m in info.inputs.items()}
        # gradients as AOTAutograd traced them; where it recorded none, the tensor's own structure
        self.state_grads = {fqn: resolve(info.state_grads[fqn], trusted, f"{where}.state_grads.{fqn}")
                            if fqn in info.state_grads else r for fqn, r in self.state.items()}
        self.input_grads = {k: resolve(info.input_grads[str(k)], trusted, f"{where}.input_grads.{k}")
                            if str(k) in info.input_grads else r for k, r in self.inputs.items()}
        self.outputs = {int(k): resolve(m, trusted, f"{where}.outputs.{k}") for k, m in info.outputs.items()}
        self.in_spec = load_spec(info.in_spec)
        self.out_spec = load_spec(info.out_spec)
        self.input_names = info.input_names
        self._tables: dict[str, tuple[dict, str]] = {}

    # ----------------------------------------------------------------- state

    def outer_weights(self, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Dense weights (`w:a`, `w:b`) -> the subclass `w`, in the same place of the order."""
        out: dict[str, torch.Tensor] = {}
        for name, t in weights.items():
            fqn = self.owner.get(name)
            if fqn is None:
                out[name] = t
            elif fqn not in out:
                out[fqn] = self.state[fqn].build([weights[n] for n in self.inner_state[fqn]])
        return out

    def bind(self, tables: dict[str, tuple[dict, str]]) -> None:
        """Where the loaded module keeps each subclass parameter/buffer (slot_getter's tables)."""
        self._tables = tables

    def dense_state(self) -> dict[str, torch.Tensor]:
        """Every subclass parameter/buffer's plain tensors by their graph names, connected
        to the subclass by Unwrap when it takes a gradient."""
        grad = torch.is_grad_enabled()
        out = {}
        for fqn, (table, name) in self._tables.items():
            t = table[name]
            r = self.state[fqn]
            inner = Unwrap.apply(r, self.state_grads[fqn], t) if grad and t.requires_grad else r.plain(t)
            out.update(zip(self.inner_state[fqn], inner))
        return out

    def outer_grads(self, grads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Gradients by dense name -> by subclass FQN (a joint step's `.grad`s)."""
        out = {}
        for fqn, names in self.inner_state.items():
            if all(n in grads for n in names):
                out[fqn] = self.state_grads[fqn].build([grads[n] for n in names])
        return out

    # ----------------------------------------------------------------- inputs/outputs

    def dense_inputs(self, args: tuple, kwargs: dict) -> list:
        flat, spec = pytree.tree_flatten((args, kwargs))
        if spec != self.in_spec:
            raise InputError(
                f"expected {len(self.input_names)} input(s) ({', '.join(self.input_names)}) in the exported "
                f"structure; got {len(flat)} in a different structure: {len(args)} positional, kwargs {sorted(kwargs)}."
            )
        grad = torch.is_grad_enabled()
        dense = []
        for i, t in enumerate(flat):
            r = self.inputs.get(i)
            if r is None:
                if isinstance(t, torch.Tensor) and type(t) not in (torch.Tensor, torch.nn.Parameter):
                    raise InputError(f"input '{self.input_names[i]}' is a {type(t).__name__}; the bundle was "
                                     "exported with a plain tensor there.")
                dense.append(t)
                continue
            r.check(t, f"input {self.input_names[i]}")
            dense.extend(Unwrap.apply(r, self.input_grads[i], t) if grad and t.requires_grad else r.plain(t))
        return dense

    def outer_inputs(self, dense: list) -> Any:
        """Dense flat inputs (golden or random ones, made from metadata) -> (args, kwargs)
        as a caller passes them, subclasses rebuilt around the same tensors."""
        outer, at = [], 0
        for i in range(self.in_spec.num_leaves):
            r = self.inputs.get(i)
            n = 1 if r is None else r.count
            outer.append(dense[at] if r is None else r.build(dense[at : at + n]))
            at += n
        return pytree.tree_unflatten(outer, self.in_spec)

    def outer_outputs(self, dense: list) -> Any:
        grad = torch.is_grad_enabled()
        outer, at = [], 0
        for k in range(self.out_spec.num_leaves):
            r = self.outputs.get(k)
            if r is None:
                outer.append(dense[at])
                at += 1
                continue
            tensors = dense[at : at + r.count]
            at += r.count
            if grad and any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors):
                outer.append(Wrap.apply(r, *tensors))
            else:
                outer.append(r.build(tensors))
        return pytree.tree_unflatten(outer, self.out_spec)


def caller_inputs(bundle, inputs: Any, trusted: Iterable[str | type] = ()) -> Any:
    """`inputs` made in the graphs' dense view (verify's golden inputs, random ones) as
    the caller passes them: with every subclass input rebuilt."""
    info = bundle.metadata.subclasses
    if info is None or not info.inputs:
        return inputs
    return SubclassLayer(info, trusted).outer_inputs(pytree.tree_leaves(inputs))
