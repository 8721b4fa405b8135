"""A compiled joint graph that updates parameters, optimizer state and buffers in place.

A joint graph returns every new value (parameters and optimizer state when it carries
its optimizer, BatchNorm's running statistics) and the runtime copies each into place.
Compiled that way, AOTInductor writes tens of MB of fresh outputs per step (a page fault
per 4 KiB on CPU) and the runtime then reads and writes them once more: resnet18's SGD
step spent 20 ms in that update kernel and 6 ms in the copies, against eager's 7 ms.

So for AOTInductor the joint graph is re-exported with those outputs written into their
inputs (`copy_`, which AOTInductor turns into stores to the input's memory) and returned
no more, and, when the graph runs the optimizer, without the parameters' gradients,
which nothing reads. `InPlaceUpdates.outputs` rebuilds the graph's full output list for
the runtime: the input itself where a new value was written into it, None for a dropped
gradient. The copies the runtime then makes are of a tensor onto itself, which it skips.

Only data updates of parameters, buffers and optimizer state are made in place, never a
user input's nor a tied parameter's (one tensor passed for two inputs), and a call whose
mutated inputs share memory with another input is refused (the compiled code assumes
they do not; the runtime's copies after the graph did not).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch

from aotc.capture.flat_programs import reexport
from aotc.errors import GraphRunError

# the build fingerprint's mark ("updates") of a package compiled this way
IN_PLACE = "in_place"


@dataclass(frozen=True)
class InPlaceUpdates:
    writes: tuple[tuple[int, int], ...]  # (output, input) positions of the full graph
    dropped: tuple[int, ...]  # outputs the package no longer returns
    num_outputs: int  # of the full graph

    def kept(self) -> list[int]:
        gone = {o for o, _ in self.writes} | set(self.dropped)
        return [o for o in range(self.num_outputs) if o not in gone]

    def outputs(self, args: list, returned: list) -> list:
        """The full graph's outputs from the package's: inputs where values were written."""
        full: list = [None] * self.num_outputs
        for o, value in zip(self.kept(), returned):
            full[o] = value
        for o, i in self.writes:
            full[o] = args[i]
        return full


def plan(bundle, kind: str) -> InPlaceUpdates | None:
    """What of `kind`'s outputs can be written in place; None when nothing can."""
    if kind != "joint" or bundle.metadata.subclasses is not None:
        return None  # a subclass parameter's inner tensors are gathered into new tensors per call
    sig, meta = bundle.signature.graphs[kind], bundle.metadata.programs[kind]
    inputs = {(s.role, s.target): i for i, s in enumerate(sig.inputs)}
    # a tied parameter (GPT-2's embedding and output weights) is one tensor passed for two
    # inputs: the compiled code may not write into memory another input reads
    tied = {k for k, n in Counter((s.role, s.target) for s in sig.inputs).items() if n > 1}
    names = [s.name for s in sig.inputs]
    writes = []
    for o, s in enumerate(sig.outputs):
        if s.role == "updated_parameter" and ("parameter", s.target) not in tied:
            writes.append((o, inputs[("parameter", s.target)]))
        elif s.role == "optimizer_state":
            writes.append((o, inputs[("optimizer_state", s.target)]))
        elif s.role == "input_mutation":
            i = names.index(s.name.removeprefix("mutated:"))
            info = meta.inputs[i]
            slot = sig.inputs[i]
            if (info.kind == "buffer" and info.mutates_data and not info.mutates_metadata
                    and (slot.role, slot.target) not in tied):
                writes.append((o, i))
    dropped = []
    if bundle.metadata.optimizer is not None:  # the graph's optimizer took them (see joint_step._plan)
        updated = {s.target for s in sig.outputs if s.role == "updated_parameter"}
        roles = {s.name: (s.role, s.target) for s in sig.inputs}
        dropped = [o for o, s in enumerate(sig.outputs)
                   if s.role == "gradient" and roles.get(s.name.removeprefix("grad:"), (None, None))[0] == "parameter"
                   and roles[s.name.removeprefix("grad:")][1] in updated]
    if not writes and not dropped:
        return None
    return InPlaceUpdates(tuple(writes), tuple(dropped), len(sig.outputs))


class _Updating(torch.nn.Module):
    """The joint graph, its new values copied into their inputs and no longer returned."""

    def __init__(self, graph, updates: InPlaceUpdates):
        super().__init__()
        self.graph = graph
        self.updates = updates

    def forward(self, *args):
        outs = self.graph(*args)
        for o, i in self.updates.writes:
            args[i].copy_(outs[o])
        return tuple(outs[o] for o in self.updates.kept())


def rewrite(program, updates: InPlaceUpdates, example_inputs: list):
    """`program` re-exported as _Updating over it (see the module docstring)."""
    fake = [p.meta["val"] for p in program.graph.find_nodes(op="placeholder")]
    return reexport(_Updating(program.module(), updates), example_inputs, fake, "joint (in place)")


class InPlaceRun:
    """A package compiled from `rewrite`'s program, called like the full graph."""

    def __init__(self, run, updates: InPlaceUpdates):
        self._run = run
        self.updates = updates
        self._written = [i for _, i in updates.writes]
        self._checked: tuple | None = None  # data pointers of the last call's inputs, checked

    def __call__(self, args: list) -> list:
        pointers = tuple(a.data_ptr() if isinstance(a, torch.Tensor) else None for a in args)
        if pointers != self._checked:
            _check_disjoint(args, self._written)
            self._checked = pointers
        returned = self._run(list(args))  # the loader's boxed run empties the list it is given
        torch.autograd.graph.increment_version([args[i] for i in self._written])  # as eager's in-place update
        return self.updates.outputs(args, returned)


def _check_disjoint(args: list, written: list[int]) -> None:
    """Refuse a call where an input written in place overlaps another input's memory."""
    spans = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor) and a.numel():
            extent = 1 + sum((n - 1) * abs(s) for n, s in zip(a.shape, a.stride()))
            spans.append((a.data_ptr(), a.data_ptr() + extent * a.element_size(), i))
    spans.sort()
    mutated = set(written)
    active: list[tuple[int, int]] = []  # (end, index) of spans that reach the current start
    for start, end, i in spans:
        active = [(e, j) for e, j in active if e > start]
        for _, j in active:
            if i in mutated or j in mutated:
                raise GraphRunError(
                    f"inputs {min(i, j)} and {max(i, j)} of the joint graph share memory and the compiled "
                    "step updates one of them in place; give each parameter, buffer and optimizer state "
                    "tensor memory of its own (e.g. .clone() a tied one), or load with backend='fx'."
                )
        active.append((end, i))
