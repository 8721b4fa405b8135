"""A corpus of small programs covering the mutation and aliasing cases AOTAutograd handles.

Each case builds a fresh module and fresh inputs on every call (same values each time),
so eager and the loaded bundle can each run on their own copy. `train=True` cases are
also exported as forward+backward bundles and compared on gradients.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn


class Body(nn.Module):
    """A module with one Linear (so there is something to differentiate) and a body fn."""

    def __init__(self, fn, buffers: dict | None = None):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        for name, value in (buffers or {}).items():
            self.register_buffer(name, value)
        self.fn = fn

    def forward(self, *args, **kwargs):
        return self.fn(self, *args, **kwargs)


@dataclass
class Case:
    """One program. `inputs(g)` returns positional args, or a dict with "args",
    "kwargs" and "leaves" (the tensors that requires-grad inputs were computed from, whose
    .grad the checker compares). `train` cases are also exported as forward+backward."""

    name: str
    fn: Callable | None = None  # fn(m, *inputs) for a Body
    module: Callable[[], nn.Module] | None = None
    inputs: Callable[[torch.Generator], tuple | dict] | None = None
    train: bool = False
    buffers: dict = field(default_factory=dict)
    input_grad: bool = False  # x requires grad (training cases)
    family: str = "aotc"
    # torch.export's dynamic_shapes for the call (a callable taking the case's (args, kwargs))
    dynamic_shapes: object = None

    def dynamic(self, args: tuple, kwargs: dict):
        return self.dynamic_shapes(args, kwargs) if callable(self.dynamic_shapes) else self.dynamic_shapes

    def build(self) -> nn.Module:
        torch.manual_seed(0)
        if self.module is not None:
            return self.module()
        return Body(self.fn, {k: v.clone() for k, v in self.buffers.items()})

    def make_call(self) -> tuple[tuple, dict, list]:
        """(args, kwargs, leaves): fresh tensors with the same values on every call."""
        g = torch.Generator().manual_seed(1)
        if self.inputs is not None:
            made = self.inputs(g)
            if isinstance(made, dict):
                return tuple(made.get("args", ())), dict(made.get("kwargs", {})), list(made.get("leaves", []))
            return tuple(made), {}, []
        x = torch.randn(3, 4, generator=g)
        y = torch.randn(3, 4, generator=g)
        if self.input_grad:
            x.requires_grad_(True)
        return (x, y), {}, []

    def make_inputs(self) -> tuple[tuple, dict]:
        """(args, kwargs), fresh tensors with the same values on every call."""
        args, kwargs, _ = self.make_call()
        return args, kwargs


def _square(g):
    return torch.randn(4, 4, generator=g), torch.randn(4, 4, generator=g)


def _same_twice(g):
    x = torch.randn(3, 4, generator=g)
    return x, x


def _non_contiguous(g):
    return torch.randn(4, 3, generator=g).t(), torch.randn(3, 4, generator=g)


def _offset_view(g):
    base = torch.randn(5, 4, generator=g)
    return base[2:], torch.randn(3, 4, generator=g)


class KwargsModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, *, scale):
        scale.add_(1)
        return self.lin(x) * scale


class NestedModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, batch):
        a, (b, c) = batch["a"], batch["pair"]
        c.mul_(2)
        return {"sum": self.lin(a) + b, "view": c.view(-1), "both": (a * 2, b.t())}


class GradModeModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, y):
        out = self.lin(x) + y
        torch.set_grad_enabled(False)  # leaks out of forward in eager; the runtime replays it
        return out


class TiedModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Linear(4, 4, bias=False)
        self.head = nn.Linear(4, 4, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, x, y):
        return self.head(torch.tanh(self.emb(x))) + y


class BatchNormModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x, y):
        return self.bn(self.lin(x)) * y


class DropoutModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x, y):
        return self.drop(self.lin(x)) + y


class ReturnsInput(torch.autograd.Function):
    """A custom autograd.Function whose forward returns its input unchanged."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


def _two_leaves(g):
    return torch.randn(3, 4, generator=g).requires_grad_(True), torch.randn(3, 4, generator=g).requires_grad_(True)


def _kwargs_inputs(g):
    return {"args": (torch.randn(3, 4, generator=g),), "kwargs": {"scale": torch.randn(3, 4, generator=g)}}


def _nested_inputs(g):
    a, b, c = (torch.randn(3, 4, generator=g) for _ in range(3))
    return ({"a": a, "pair": (b, c)},)


def _lin(m, x):
    return m.lin(x)


def _no_grad_add(m, x, y):
    with torch.no_grad():
        y.add_(1)
    return _lin(m, x) * y


CASES = [
    Case("plain", lambda m, x, y: _lin(m, x) + y, train=True),
    Case("data_mutation", lambda m, x, y: (y.mul_(2), _lin(m, x) + y)[1], train=True),
    Case("mutate_and_return_input", lambda m, x, y: (y.add_(1), y)[1]),
    Case("return_input_unchanged", lambda m, x, y: (_lin(m, x), y), train=True),
    Case("view_of_input", lambda m, x, y: (_lin(m, x), y.view(-1)), train=True),
    Case("view_of_mutated_input", lambda m, x, y: (y.mul_(2), y.view(-1))[1]),
    Case("transpose_of_input", lambda m, x, y: y.t()),
    Case("slice_of_input", lambda m, x, y: (_lin(m, x), y[1:]), train=True),
    Case("metadata_mutation_t", lambda m, x, y: (y.t_(), _lin(m, x) + y)[1], inputs=_square, train=True),
    Case("metadata_mutation_unsqueeze", lambda m, x, y: (y.unsqueeze_(0), y)[1]),
    Case("metadata_mutation_transpose", lambda m, x, y: (y.transpose_(0, 1), y * 2)[1]),
    Case("mutation_under_no_grad", _no_grad_add, train=True),
    Case("two_mutated_inputs", lambda m, x, y: (x.add_(1), y.mul_(2), x + y)[2]),
    Case("mutation_through_view", lambda m, x, y: (y[0].fill_(0), y.sum())[1]),
    Case("mutate_slice_return_other_slice", lambda m, x, y: (y[:, 0].mul_(3), y[:, 1])[1]),
    Case("view_of_intermediate", lambda m, x, y: (_lin(m, x) * 2).view(-1), train=True),
    Case("intermediate_and_its_view", lambda m, x, y: ((h := _lin(m, x) + y), h.t()), train=True),
    Case("two_views_of_one_intermediate", lambda m, x, y: ((h := _lin(m, x) + 1)[0], h[1]), train=True),
    Case("view_chain_of_intermediate", lambda m, x, y: ((h := _lin(m, x) * y).view(2, -1).t(), h), train=True),
    Case("same_output_twice", lambda m, x, y: ((h := _lin(m, x) * 2), h), train=True),
    Case(
        "buffer_mutation",
        lambda m, x, y: (m.count.add_(x.sum(0)), _lin(m, x) + m.count)[1],
        buffers={"count": torch.zeros(4)},
        train=True,
    ),
    Case("buffer_returned", lambda m, x, y: (m.count.mul_(2), m.count)[1], buffers={"count": torch.ones(4)}),
    Case("parameter_returned", lambda m, x, y: (_lin(m, x), m.lin.weight), train=True),
    Case("parameter_view_returned", lambda m, x, y: (_lin(m, x), m.lin.weight.t()), train=True),
    Case("same_tensor_twice", lambda m, x, y: _lin(m, x) + y, inputs=_same_twice, train=True),
    Case("same_tensor_twice_mutated", lambda m, x, y: (x.add_(1), _lin(m, x) + y)[1], inputs=_same_twice),
    Case("non_contiguous_input", lambda m, x, y: (x.mul_(2), x + y)[1], inputs=_non_contiguous),
    Case("non_contiguous_view_output", lambda m, x, y: (x.t(), x[0]), inputs=_non_contiguous),
    Case("input_with_storage_offset", lambda m, x, y: (x.add_(1), x.view(-1))[1], inputs=_offset_view),
    Case("kwargs_input_mutated", module=KwargsModel, inputs=_kwargs_inputs, train=True),
    Case("nested_inputs_and_outputs", module=NestedModel, inputs=_nested_inputs, train=True),
    Case("integer_and_bool_outputs", lambda m, x, y: (_lin(m, x).argmax(-1), x > y, _lin(m, x)), train=True),
    Case("grad_mode_mutation", module=GradModeModel, train=True),
    Case("tied_weights", module=TiedModel, train=True),
    Case("batchnorm", module=BatchNormModel, train=True),
    Case("dropout", module=DropoutModel, train=True),
    Case("input_requires_grad", lambda m, x, y: _lin(m, x) * y, train=True, input_grad=True),
    Case("input_view_output_with_grad", lambda m, x, y: (_lin(m, x), x.view(-1)), train=True, input_grad=True),
    # differentiable outputs that only alias inputs: no backward graph, gradients flow
    # through views of the caller's tensors
    Case("custom_function_returns_input", lambda m, x, y: ReturnsInput.apply(x), inputs=_two_leaves, train=True),
    Case("same_input_twice_in_output_dict", lambda m, x, y: {"a": x, "b": x}, inputs=_two_leaves, train=True),
    Case("views_of_two_inputs_only", lambda m, x, y: (x.view(x.shape), y.view(-1)), inputs=_two_leaves, train=True),
]



def all_cases() -> list[Case]:
    """This file's cases and those ported from PyTorch's test_aotdispatch.py."""
    from corpus_upstream import CASES as UPSTREAM

    return [*CASES, *UPSTREAM]


# families whose forward+backward bundles make test also compiles for AOTInductor: the
# runtime rebuilds their outputs' aliasing from compiled outputs in training too (views of
# inputs and intermediates, synthetic bases, views inside its autograd.Function)
AOTI_TRAIN_FAMILIES = {"synthetic_base", "custom_function", "output_aliases", "input_output_view"}


def compiled_in_ci(cases: list[Case], backend: str = "onnx", mode: str = "eval") -> set[str]:
    """Names of the cases whose `mode` bundles `make test` exports to ONNX, or (backend
    "aoti") compiles for AOTInductor.

    AOTInductor takes 10-20 s per graph here (a clean clone compiles every one) and the
    ONNX exporter about 2 s, and the full corpus has over 300 graphs. ONNX takes every fifth
    synthetic-base program (the aliasing the runtime rebuilds from compiled outputs), every
    twelfth program of this file, every tenth of the custom_function family (whose outputs
    the runtime rebuilds as views inside its autograd.Function), every sixteenth of each
    other upstream family (the first of each included): 17 programs, 33 bundles.
    AOTInductor takes the first of each family and every fifth synthetic-base program, 13
    programs, and the forward+backward bundles of AOTI_TRAIN_FAMILIES' among them: 18
    bundles (its 26 made the `compiled` fixture 639 s of the rest's 2,140 in a clean-clone
    `make test`, 39 minutes in all). Every program runs on fx either way; AOTC_FULL_CORPUS=1
    compiles and exports all of them (about 30 minutes more).
    """
    chosen, seen = set(), {}
    for case in cases:
        position = seen[case.family] = seen.get(case.family, -1) + 1
        if backend == "aoti":
            every = 5 if case.family == "synthetic_base" else len(cases)
            if mode == "train" and case.family not in AOTI_TRAIN_FAMILIES:
                continue
        else:
            every = {"synthetic_base": 5, "aotc": 12, "custom_function": 10}.get(case.family, 16)
        if position % every == 0:
            chosen.add(case.name)
    return chosen
