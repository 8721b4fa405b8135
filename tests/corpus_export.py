"""Programs ported from PyTorch's torch.export and AOTInductor tests: test/export/test_export.py
(`TestDynamismExpression`, `TestExport`, `TestOneOffModelExportResult`, `TestExportCustomClass`),
test/inductor/test_aot_inductor.py (`AOTInductorTestsTemplate`) and the models of
test/inductor/test_control_flow.py (`CondModels`, `WhileLoopModels`, `ScanModels`, `MapModels`,
`AssociativeScanTests`): the calling conventions torch.export accepts (containers, kwargs,
keyword-only and variadic arguments, namedtuples and registered dataclasses, optional tensors
passed as None), non-tensor inputs (bool, int, float, str, torch.Size, ints made symbolic with
Dim), output containers (dicts, lists, namedtuples, torch.return_types, registered dataclasses,
constants, None, ints and floats from .item() or sizes), tensor constants created in forward or
held as plain module attributes, non-persistent buffers, a buffer registered as None, programs
with no inputs, torch.cond / while_loop / map / scan / associative_scan, custom ops (functional,
mutating, returning ints, with a registered autograd formula), data-dependent shapes, dynamic
shapes (Dim ranges, derived dims, Dim.AUTO / Dim.DYNAMIC, shared dims) and buffer / input
mutation and aliasing.

These are aotc's own small programs, written after the upstream ones: each keeps the ops, the
input structure, the non-tensor arguments, what is returned and the feature being tested, with
small shapes (3x4 and the like), on CPU. Every case names its family (`family`: "export",
"aot_inductor" or "control_flow"); the upstream test each one comes from is given in the comment
above it, and where a case departs from upstream (a random op replaced, a CUDA-only detail
dropped) the comment says so. `dynamic_shapes` is what the upstream test passes to
torch.export (built per call, so no Dim is shared between cases).

Where upstream differentiates (`autograd=True` runs, inputs that require grad) or the program is
a natural training program with parameters and floating-point outputs, the case is `train=True`;
upstream's requires-grad inputs are leaves listed under "leaves".

Custom ops live in the `aotc_test` namespace and the dataclasses are registered with pytree when
this module is imported (with a `serialized_type_name` only where upstream gives one).
"""

from __future__ import annotations

import dataclasses
from collections import namedtuple
from functools import partial
from typing import NamedTuple

import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from functorch.experimental.control_flow import map as functorch_map
from torch import nn
from torch._higher_order_ops.associative_scan import associative_scan
from torch._higher_order_ops.map import map as hop_map
from torch._higher_order_ops.scan import scan
from torch._higher_order_ops.while_loop import while_loop
from torch.export import Dim

from corpus import Case

_EX = partial(Case, family="export")
_AOTI = partial(Case, family="aot_inductor")
_CF = partial(Case, family="control_flow")

AUTO, STATIC, DYNAMIC = Dim.AUTO, Dim.STATIC, Dim.DYNAMIC

# ---------------------------------------------------------------------------------------
# helpers: input builders (all values come from the generator, or are fixed constants, so
# every call builds equal inputs) and a builder for parameterless modules


def _randn(g, *shape, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=dtype)


def _randint(g, low, high, *shape, dtype=torch.int64) -> torch.Tensor:
    return torch.randint(low, high, shape, generator=g, dtype=dtype)


def _plain(*shapes):
    """One float tensor per shape."""

    def make(g):
        return tuple(_randn(g, *shape) for shape in shapes)

    return make


def _leaves(*shapes):
    """Float tensors that require grad (upstream's autograd=True runs); they are the leaves."""

    def make(g):
        args = tuple(_randn(g, *shape).requires_grad_(True) for shape in shapes)
        return {"args": args, "kwargs": {}, "leaves": list(args)}

    return make


def _call(*args, leaves=(), **kwargs) -> dict:
    return {"args": args, "kwargs": kwargs, "leaves": list(leaves)}


def _pred(value: bool) -> torch.Tensor:
    return torch.tensor(value)


def _module(forward):
    """A zero-arg builder of a parameterless nn.Module whose forward is `forward(self, ...)`,
    signature kept (so dynamic_shapes may name the arguments, and *args / **kwargs stay)."""
    name = "".join(part.title() for part in forward.__name__.strip("_").split("_"))
    cls = type(name, (nn.Module,), {"forward": forward, "__module__": __name__})
    return cls


# ---------------------------------------------------------------------------------------
# types registered with pytree (at import, as upstream does at the top of its tests)


@dataclasses.dataclass
class Inp1:
    x: torch.Tensor
    y: list[torch.Tensor]
    z: dict[str, torch.Tensor]


@dataclasses.dataclass
class Inp2:
    a: torch.Tensor
    b: torch.Tensor


@dataclasses.dataclass
class Inp3:
    f: torch.Tensor
    p: torch.Tensor


@dataclasses.dataclass
class ScalarsAndTensor:
    """test_additional_inputs_constants' `D`: bool, int and float fields beside a tensor."""

    b: bool
    i: int
    f: float
    t: torch.Tensor


@dataclasses.dataclass
class PairInput:
    """test_dynamic_shapes_serdes_various' `Input`."""

    a: torch.Tensor
    b: torch.Tensor


@dataclasses.dataclass
class LinearOutput:
    """A dataclass returned by forward (registered with pytree like the inputs above)."""

    out: torch.Tensor
    hidden: torch.Tensor


@dataclasses.dataclass(frozen=True)
class IntPair:
    """test_register_constant's `MyInput`: a frozen dataclass registered as a pytree constant."""

    int_1: int
    int_2: int


torch.export.register_dataclass(Inp1, serialized_type_name="test_dynamic_shapes_builder_pytree.Inp1")
torch.export.register_dataclass(Inp2, serialized_type_name="test_export_api_with_dynamic_shapes.Inp2")
torch.export.register_dataclass(Inp3, serialized_type_name="test_preserve_shape_dynamism_for_unused_inputs.Inp3")
pytree.register_dataclass(ScalarsAndTensor)
torch.export.register_dataclass(PairInput, serialized_type_name="test_dynamic_shapes_serdes_various.Input")
pytree.register_dataclass(LinearOutput)
pytree.register_constant(IntPair)

PointNT = namedtuple("PointNT", ["x", "y"])


class ValuesAndIndices(NamedTuple):
    values: torch.Tensor
    indices: torch.Tensor


# ---------------------------------------------------------------------------------------
# custom ops (defined once, at import; the names are unique in the aotc_test namespace)


# test_run_decompositions_keep_metadata's mylib::add
@torch.library.custom_op("aotc_test::add", mutates_args=())
def _custom_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


@_custom_add.register_fake
def _(x, y):
    return torch.empty_like(x)


# test_symint_tensor_return's testlib::returns_tensor_symint (a copy: custom ops may not alias)
@torch.library.custom_op("aotc_test::tensor_and_size", mutates_args=())
def _tensor_and_size(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    return x.clone(), x.shape[0]


@_tensor_and_size.register_fake
def _(x):
    return torch.empty_like(x), x.shape[0]


# test_custom_op_auto_functionalize's testlib::foo: mutates both inputs
@torch.library.custom_op("aotc_test::add_five_to_both", mutates_args=("x", "z"))
def _add_five_to_both(x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    x.add_(5)
    z.add_(5)
    return x + z


@_add_five_to_both.register_fake
def _(x, z):
    return torch.empty_like(x)


# test_draft_export_checks_mutation: mutates its second argument
@torch.library.custom_op("aotc_test::bump_second", mutates_args=("y",))
def _bump_second(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    y.add_(1)
    return x.clone()


@_bump_second.register_fake
def _(x, y):
    return torch.empty_like(x)


# test_draft_export_checks_mutation_list: mutates a tensor in a list argument
@torch.library.custom_op("aotc_test::bump_second_of_list", mutates_args=("xs",))
def _bump_second_of_list(xs: list[torch.Tensor]) -> torch.Tensor:
    x, y = xs
    y.add_(1)
    return x.clone()


@_bump_second_of_list.register_fake
def _(xs):
    return torch.empty_like(xs[0])


# test_more_multidimensional_slicing's demo::indices3d: returns ints, bounded by the fake kernel
@torch.library.custom_op("aotc_test::indices3d", mutates_args=())
def _indices3d(t: torch.Tensor, x: torch.Tensor) -> tuple[int, int, int]:
    return tuple(x[i].item() for i in range(3))


@_indices3d.register_fake
def _(t, x):
    sizes = tuple(torch.library.get_ctx().new_dynamic_size() for _ in range(3))
    for i, size in enumerate(sizes):
        torch._check(size >= 0)
        torch._check(size <= t.shape[i])
    return sizes


# test_aoti_runtime_asserts' mylib::foo: an output whose size is data-dependent
@torch.library.custom_op("aotc_test::prefix", mutates_args=())
def _prefix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a[: b.item()].clone()


@_prefix.register_fake
def _(a, b):
    return a.new_empty(torch.library.get_ctx().new_dynamic_size())


# test_same_backing's mylib::foo2
@torch.library.custom_op("aotc_test::add_same_backing", mutates_args=())
def _add_same_backing(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b


@_add_same_backing.register_fake
def _(a, b):
    return torch.empty_like(a)


# test_unbacked_deferred_runtime_retrace's testlib::foo_unbacked: an int argument
@torch.library.custom_op("aotc_test::ones_for_scalar", mutates_args=())
def _ones_for_scalar(x: int) -> torch.Tensor:
    if x > 2:
        return torch.ones(4, 4)
    return torch.ones(4, 4)


@_ones_for_scalar.register_fake
def _(x):
    return torch.empty(4, 4)


# a functional op with its own backward formula (register_autograd)
@torch.library.custom_op("aotc_test::scaled_sin", mutates_args=())
def _scaled_sin(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.sin(x) * scale


@_scaled_sin.register_fake
def _(x, scale):
    return torch.empty_like(x)


def _scaled_sin_setup(ctx, inputs, output):
    x, scale = inputs
    ctx.save_for_backward(x)
    ctx.scale = scale


def _scaled_sin_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return grad * torch.cos(x) * ctx.scale, None


_scaled_sin.register_autograd(_scaled_sin_backward, setup_context=_scaled_sin_setup)
