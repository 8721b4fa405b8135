"""Programs ported from PyTorch's own AOTAutograd tests (test/functorch/test_aotdispatch.py,
`TestAOTAutograd`, `TestAOTExport` and `test_preserve_random`): input mutations, outputs that
alias inputs or intermediates, duplicated and aliased inputs, set_(), requires_grad changes,
custom autograd.Functions (whose own backward must be kept), buffer mutations, batch norm
and random ops.

These are aotc's own small programs, written after the upstream ones: each keeps the ops,
which input is mutated, what is returned, the input shapes/strides/aliasing and the
requires_grad pattern. Every case names its family (`family`); the upstream test each one
comes from is given in the comment above it.

Where upstream runs a program with inputs that require grad, the case is `train=True` and its
inputs are computed from leaves that require grad (as upstream's `test_mutation=True` does
with `x.add(1)`), listed under "leaves". The same inputs built under `torch.no_grad()` (as the
eval check does) are plain tensors, which covers upstream's requires_grad=False run.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from corpus import Case

_IM = partial(Case, family="input_mutation")
_IOV = partial(Case, family="input_output_view")
_OA = partial(Case, family="output_aliases")
_DUPE = partial(Case, family="dupe_arg")
_SB = partial(Case, family="synthetic_base")
_SET = partial(Case, family="set_")
_RG = partial(Case, family="requires_grad")
_BUF = partial(Case, family="buffer")
_BN = partial(Case, family="batch_norm")
_RAND = partial(Case, family="random")
_CF = partial(Case, family="custom_function")

# ---------------------------------------------------------------------------------------
# input builders (all values come from the generator, so every call builds equal inputs)


def _randn(g, shape) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


def _plain(*shapes):
    """Plain tensors, one per shape."""

    def make(g):
        return tuple(_randn(g, s) for s in shapes)

    return make


def _derived(*shapes, grad=None, how="add"):
    """One input per shape, computed from a leaf (`leaf.add(1)` or `leaf.clone()`), so the
    program may mutate it; the leaf requires grad where `grad` (default: all) says so."""
    grad = (True,) * len(shapes) if grad is None else grad

    def make(g):
        leaves, args = [], []
        for shape, rg in zip(shapes, grad):
            leaf = _randn(g, shape)
            if rg:
                leaf.requires_grad_(True)
                leaves.append(leaf)
            args.append(leaf.add(1) if how == "add" else leaf.clone())
        return {"args": tuple(args), "kwargs": {}, "leaves": leaves}

    return make


def _leaves(*shapes, grad=None):
    """The leaves themselves are the inputs (upstream's runs without test_mutation)."""
    grad = (True,) * len(shapes) if grad is None else grad

    def make(g):
        args = tuple(_randn(g, s).requires_grad_(rg) for s, rg in zip(shapes, grad))
        return {"args": args, "kwargs": {}, "leaves": [a for a in args if a.requires_grad]}

    return make


def _call(args, leaves):
    return {"args": tuple(args), "kwargs": {}, "leaves": [t for t in leaves if t.requires_grad]}


# ---------------------------------------------------------------------------------------
# input_mutation


def _detach_no_grad_mixed(m, a):
    a.detach().mul_(2)
    a.mul_(3)
    with torch.no_grad():
        a.mul_(4)
    return a + 5


def _no_grad_mutation(m, a):
    with torch.no_grad():
        a.mul_(2)
    return a + 3


def _no_grad_mutation_and_output(m, a):
    with torch.no_grad():
        a.mul_(2)
        return a + 3


def _hidden_alias_mutation(m, a):
    flat = a.view(-1)
    with torch.no_grad():
        flat.mul_(2)
    return a + 1


def _strided_view_input(g):
    # a view with stride 2 of a tensor computed from a leaf (upstream: (ones(4) + 0)[0::2])
    leaf = _randn(g, (4,)).requires_grad_(True)
    return _call([(leaf + 0)[0::2]], [leaf])


def _column_input(g):
    # a non-contiguous column of a tensor computed from a leaf
    leaf = _randn(g, (2, 2)).requires_grad_(True)
    return _call([leaf.add(1)[:, 0]], [leaf])


def _false_alias_rows(g):
    # two views of one storage that do not overlap: rows 0-1 and rows 2-3
    leaf = _randn(g, (4, 4)).requires_grad_(True)
    x = leaf.add(1)
    return _call([x[0:2], x[2:4]], [leaf])


def _false_alias_columns(g):
    # non-overlapping, perfectly interleaved: columns 0-1 and columns 2-3
    x = _randn(g, (4, 4))
    return (x[:, 0:2], x[:, 2:4])


def _false_alias_as_strided(g):
    # non-overlapping, non-contiguous: a ends (offset 30) before b's next row starts
    x = _randn(g, (64,))
    return (x.as_strided((4, 4), (9, 1), 0), x.as_strided((4, 4), (9, 1), 22))


def _mul_both_sum_copies(m, a, b):
    a.mul_(3)
    b.mul_(2)
    return a.clone().view(-1) + b.clone().view(-1)


def _masked_fill_row(m, a):
    row = a[0]
    mask = torch.ones_like(row, dtype=torch.bool)
    return row.masked_fill_(mask, 0)


def _mutate_return_detached(m, a):
    a.mul_(2)
    out = a + 1
    return out.detach()


def _detach_then_mutate(m, a):
    before = a.detach()
    a.mul_(2)
    return a, before


def _sin_out(m, a, b):
    return torch.sin(a, out=b)


def _mutate_input_not_buffer(m, x):
    x.add_(4)
    return (x.cos().sum() + m.buffer1.sum(),)


INPUT_MUTATION = [
    # test_input_mutation_simple
    _IM("mutate_mul_then_scale", lambda m, a: (a.mul_(2), a * 3)[1], inputs=_derived((3, 3)), train=True),
    # test_input_mutation_is_output
    _IM("mutated_input_is_output", lambda m, a: (a.mul_(2), a)[1], inputs=_derived((3, 3)), train=True),
    # test_input_mutation_multiple
    _IM(
        "mutate_first_and_third_of_three",
        lambda m, a, b, c: (a.mul_(2), c.mul_(2), a + b + c)[2],
        inputs=_derived((3, 3), (3, 3), (3, 3)),
        train=True,
    ),
    # test_input_mutation_metadata
    _IM(
        "transpose_input_in_place_then_add",
        lambda m, a, b: (a.transpose_(1, 0), a + b)[1],
        inputs=_derived((3, 3), (3, 3)),
        train=True,
    ),
    # test_input_mutation_metadata2 (non-square, so the transpose shows)
    _IM(
        "transpose_then_data_mutation",
        lambda m, a: (a.transpose_(1, 0), a.mul_(2), a + 1)[2],
        inputs=_derived((2, 3)),
        train=True,
    ),
    # test_input_mutation_requires_grad_detach (input computed from a leaf)
    _IM(
        "mutate_detached_alias_of_input",
        lambda m, a: (a.detach().mul_(2), a + 3)[1],
        inputs=_derived((4,)),
        train=True,
    ),
    # test_input_mutation_hidden_from_autograd_aliasing
    _IM("mutate_view_of_input_under_no_grad", _hidden_alias_mutation, inputs=_derived((4,)), train=True),
    # test_input_mutation_requires_grad_no_grad
    _IM("mutate_grad_input_under_no_grad", _no_grad_mutation, inputs=_derived((4,)), train=True),
    # test_input_mutation_requires_grad_no_grad_inference_graph: no output requires grad,
    # the mutated input still does
    _IM("no_grad_mutation_and_output", _no_grad_mutation_and_output, inputs=_derived((4,)), train=True),
    # test_input_mutation_requires_grad_no_grad_detach_mixed
    _IM("mutations_detached_grad_and_no_grad", _detach_no_grad_mixed, inputs=_derived((4,)), train=True),
    # test_input_mutation_noncontiguous
    _IM("mutate_noncontiguous_column", lambda m, a: (a.mul_(2), a + 1)[1], inputs=_column_input, train=True),
    # test_mutates_input_noncontiguous: returns nothing at all
    _IM("mutate_strided_input_return_nothing", lambda m, a: (a.add_(1), ())[1], inputs=_strided_view_input, train=True),
    # test_input_mutation_false_aliasing (inp_callable1: disjoint rows)
    _IM("mutate_disjoint_rows_of_one_base", _mul_both_sum_copies, inputs=_false_alias_rows, train=True),
    # test_input_mutation_false_aliasing (inp_callable3: interleaved columns)
    _IM("mutate_interleaved_columns_of_one_base", _mul_both_sum_copies, inputs=_false_alias_columns),
    # test_input_mutation_false_aliasing (inp_callable4: as_strided, no overlap)
    _IM("mutate_disjoint_as_strided_views", _mul_both_sum_copies, inputs=_false_alias_as_strided),
    # test_default_partitioner_saves_symints_not_tensors_for_bw
    _IM("masked_fill_row_of_input_returned", _masked_fill_row, inputs=_derived((2, 2), how="clone"), train=True),
    # test_input_mutation_modifies_autograd_meta_of_aliases
    _IM("mutate_input_return_detached", _mutate_return_detached, inputs=_derived((3, 3), how="clone"), train=True),
    # test_view_detach
    _IM("detach_then_mutate_input", _detach_then_mutate, inputs=_derived((3, 3)), train=True),
    # test_input_mutation_return
    _IM("sin_with_out_input", _sin_out, inputs=_plain((3, 3), (3, 3))),
    # test_aot_export_forward_mutation_no_buffer_mut
    _IM(
        "mutate_input_beside_unchanged_buffer",
        _mutate_input_not_buffer,
        inputs=_plain((3, 4)),
        buffers={"buffer1": torch.ones(3, 4)},
    ),
    # test_input_mutation_requires_grad_detach, run on the leaf itself (test_mutation=False):
    # eager may change a leaf that requires grad only behind autograd's back
    _IM("mutate_detached_leaf", lambda m, a: (a.detach().mul_(2), a + 3)[1], inputs=_leaves((4,)), train=True),
    # the same through .data
    _IM("mutate_data_of_leaf", lambda m, a: (a.data.mul_(2), a + 3)[1], inputs=_leaves((4,)), train=True),
    # test_input_mutation_requires_grad_no_grad on the leaf itself
    _IM("mutate_leaf_under_no_grad", _no_grad_mutation, inputs=_leaves((4,)), train=True),
    # test_input_mutation_hidden_from_autograd_aliasing on the leaf itself
    _IM("mutate_view_of_leaf_under_no_grad", _hidden_alias_mutation, inputs=_leaves((4,)), train=True),
]

# ---------------------------------------------------------------------------------------
# input_output_view


def _mutate_two_return_views(m, a, b, c):
    a.mul_(2)
    c.mul_(3)
    return b.view(2, 2), c.view(2, 2)


def _data_and_t_mutation_return_views(m, a, b, c):
    b.mul_(3)
    c.t_()
    return a.view(2, 2), b.view(2, 2), c.view(2, 2)


def _mutation_output_view_multiple(m, a, b, c, d):
    b.transpose_(1, 0)
    c.add_(1)
    return d + 1, b.diagonal(), a + c


def _t_then_mutate_row(m, a):
    a.t_()
    a[0].mul_(2)
    return a.view(a.shape)


def _t_one_view_both(m, a, b):
    a.t_()
    return b.view(b.shape), a.view(a.shape)


def _all_alias_types(m, a):
    a.transpose_(1, 0)
    tmp = a.mul(2)
    return tmp.squeeze(), tmp.transpose(1, 0), a.unsqueeze(0)


def _view_and_row_of_one_base(g):
    leaf = _randn(g, (2, 2)).requires_grad_(True)
    x = leaf.mul(2)
    return _call([x.view(-1), x[0]], [leaf])


INPUT_OUTPUT_VIEW = [
    # test_input_output_view_simple
    _IOV("return_flat_view_of_input", lambda m, a: a.view(-1), inputs=_derived((2, 2)), train=True),
    # test_input_output_view_mutate_multiple
    _IOV(
        "mutate_two_return_views_of_two",
        _mutate_two_return_views,
        inputs=_derived((2, 2), (2, 2), (2, 2)),
        train=True,
    ),
    # test_input_output_view_metadata_mutate_multiple
    _IOV(
        "data_and_t_mutation_return_views",
        _data_and_t_mutation_return_views,
        inputs=_derived((2, 2), (2, 2), (2, 2)),
        train=True,
    ),
    # test_input_mutation_and_output_view
    _IOV("add_in_place_return_flat_view", lambda m, a: (a.add_(1), a.view(-1))[1], inputs=_derived((2, 2)), train=True),
    # test_input_mutation_output_view_multiple
    _IOV(
        "transpose_mutate_return_diagonal",
        _mutation_output_view_multiple,
        inputs=_derived((2, 2), (2, 2), (2, 2), (2, 2)),
        train=True,
    ),
    # test_input_data_and_metadata_mutation (non-square, so t_ shows)
    _IOV("t_then_mutate_row_return_view", _t_then_mutate_row, inputs=_derived((2, 3)), train=True),
    # test_view_and_inplace_view
    _IOV("t_one_input_view_both", _t_one_view_both, inputs=_derived((2, 3), (3, 3)), train=True),
    # test_output_all_alias_types
    _IOV("all_three_alias_types", _all_alias_types, inputs=_derived((1, 2, 4), how="clone"), train=True),
    # test_output_aliases_multiple_inputs_get_correct_one
    _IOV(
        "views_of_two_aliased_inputs",
        lambda m, a, b: (a.view(a.shape), b.view(b.shape)),
        inputs=_view_and_row_of_one_base,
        train=True,
    ),
]

# ---------------------------------------------------------------------------------------
# output_aliases


def _times3(a):
    return torch.mul(a, 3)


def _t_detach_intermediate(m, a):
    out = _times3(a)
    out.t_()
    out.detach_()
    return out, a + 1


def _multiple_mixed(m, a):
    out1 = _times3(a)
    out2 = torch.mul(a, 4)
    return out1.view(-1), out2.transpose(1, 0), out1.transpose(1, 0)


def _transpose_and_detached(m, x):
    x = x + 1
    a = x.transpose(0, 1)
    return a.detach(), a


OUTPUT_ALIASES = [
    # test_output_aliases_intermediate_single
    _OA("flat_view_of_intermediate", lambda m, a: _times3(a).view(-1), inputs=_derived((3, 3)), train=True),
    # test_output_aliases_intermediate_no_grad
    _OA(
        "view_of_no_grad_intermediate_beside_grad_output",
        lambda m, a, b: (_times3(a).view(-1), b.add(1)),
        inputs=_derived((3, 3), (3, 3), grad=(False, True)),
        train=True,
    ),
    # test_output_aliases_intermediate_returned_multiple_times
    _OA(
        "intermediate_twice_and_its_view",
        lambda m, a: ((o := _times3(a)), o.view(-1), o),
        inputs=_derived((3, 3)),
        train=True,
    ),
    # test_output_aliases_intermediate_multiple
    _OA(
        "two_flat_views_of_intermediate",
        lambda m, a: ((o := _times3(a)).view(-1), o.view(-1)),
        inputs=_derived((3, 3)),
        train=True,
    ),
    # test_output_aliases_intermediate_and_returned
    _OA(
        "view_of_intermediate_then_intermediate",
        lambda m, a: ((o := _times3(a)).view(-1), o),
        inputs=_derived((3, 3)),
        train=True,
    ),
    # test_output_aliases_intermediate_and_returned_different_grad
    _OA(
        "intermediate_view_and_detached_row",
        lambda m, a: ((o := _times3(a)).view(-1), o, o[0].detach()),
        inputs=_derived((3, 3)),
        train=True,
    ),
    # test_output_aliases_intermediate_inplace_view_with_detach
    _OA("t_and_detach_intermediate_in_place", _t_detach_intermediate, inputs=_derived((2, 4)), train=True),
    # test_output_aliases_intermediate_multiple_mixed
    _OA("views_of_two_intermediates_mixed", _multiple_mixed, inputs=_derived((3, 3)), train=True),
    # test_output_aliases_input_multi_output_view (f1): the input is the leaf itself
    _OA("unbind_input", lambda m, a: list(a.unbind(0)), inputs=_leaves((3, 3)), train=True),
    # test_output_aliases_input_multi_output_view (f3)
    _OA(
        "unbind_input_and_view_of_it",
        lambda m, a: (*a.unbind(0), a.view(a.shape)),
        inputs=_derived((3, 3), how="clone"),
        train=True,
    ),
    # test_output_aliases_intermediate_multi_output_view (f1)
    _OA("unbind_intermediate", lambda m, a: list(_times3(a).unbind(0)), inputs=_leaves((3, 3)), train=True),
    # test_output_aliases_intermediate_multi_output_view (f3)
    _OA(
        "unbind_intermediate_and_view",
        lambda m, a: (*(o := _times3(a)).unbind(0), o.view(o.shape)),
        inputs=_leaves((3, 3)),
        train=True,
    ),
    # test_output_aliases_intermediate_multi_output_view (f4)
    _OA(
        "unbind_intermediate_itself_and_view",
        lambda m, a: (*(o := _times3(a)).unbind(0), o, o.view(o.shape)),
        inputs=_leaves((3, 3)),
        train=True,
    ),
    # test_alias_of_intermediate_detach
    _OA("detached_and_live_transpose_of_intermediate", _transpose_and_detached, inputs=_leaves((3, 3)), train=True),
]

# ---------------------------------------------------------------------------------------
# dupe_arg


def _same_leaf_twice(g):
    leaf = _randn(g, (3, 3)).requires_grad_(True)
    return _call([leaf, leaf], [leaf])


def _same_clone_twice(shape):
    def make(g):
        leaf = _randn(g, shape).requires_grad_(True)
        x = leaf.clone()
        return _call([x, x], [leaf])

    return make


def _first_and_third_same(g):
    a = _randn(g, (2,))
    return (a, _randn(g, (2,)), a)


def _t_and_unsqueeze_same(m, x, y):
    x.t_()
    y.unsqueeze_(0)
    return x + y


def _unsqueeze_both(m, x, y):
    x.unsqueeze_(0)
    y.unsqueeze_(0)
    return (x + y,)


DUPE_ARG = [
    # test_dupe_arg
    _DUPE("same_leaf_passed_twice", lambda m, x, y: x + y, inputs=_same_leaf_twice, train=True),
    # test_dupe_arg_torture (non-square, so t_ shows)
    _DUPE("same_input_t_and_unsqueeze", _t_and_unsqueeze_same, inputs=_same_clone_twice((2, 3)), train=True),
    # test_dupe_arg_returned_as_output
    _DUPE(
        "dupe_arg_mutated_returned_by_other_name",
        lambda m, a, b, a_: (a[0].add_(1), a_)[1],
        inputs=_first_and_third_same,
    ),
    # test_invalid_dupe_left_bias
    _DUPE(
        "dupe_arg_only_first_t_",
        lambda m, x, y: (x.t_(), (x + y,))[1],
        inputs=_same_clone_twice((3, 3)),
        train=True,
    ),
    # _test_invalid_dupe (test_invalid_dupe)
    _DUPE("dupe_arg_unsqueeze_both", _unsqueeze_both, inputs=_same_clone_twice((3, 3)), train=True),
]

# ---------------------------------------------------------------------------------------
# synthetic_base: inputs that are views of one base, one of them mutated


def _same_row_twice(shape):
    def make(g):
        leaf = _randn(g, shape).requires_grad_(True)
        x = leaf.add(1)
        return _call([x[0], x[0]], [leaf])

    return make


def _row_and_whole(g):
    leaf = _randn(g, (2, 2)).requires_grad_(True)
    x = leaf.add(1)
    return _call([x[0], x], [leaf])


def _two_flat_views(g):
    leaf = _randn(g, (2, 2)).requires_grad_(True)
    x = leaf.add(1)
    return _call([x.view(-1), x.view(-1)], [leaf])


def _first_and_third_alias(g):
    l1 = _randn(g, (2, 2)).requires_grad_(True)
    l2 = _randn(g, (2, 2)).requires_grad_(True)
    x, y = l1.add(1), l2.add(1)
    return _call([x.view(-1), y, x.view(-1)], [l1, l2])


def _aliased_no_grad_plus_grad_leaf(g):
    base = _randn(g, (2, 2))
    c = _randn(g, (2, 2)).requires_grad_(True)
    x = base.add(1)
    return _call([x.view(-1), x.view(-1), c], [c])


def _interleaved_pairs(g):
    l1 = _randn(g, (2, 2)).requires_grad_(True)
    l2 = _randn(g, (2, 2)).requires_grad_(True)
    x1, x2 = l1.add(1), l2.add(1)
    # a and c alias, b and d alias
    return _call([x1.view(-1), x2.view(-1), x1.view(-1), x2.view(-1)], [l1, l2])


def _everything_inputs(g):
    l1 = _randn(g, (2, 2)).requires_grad_(True)
    l2 = _randn(g, (2, 2)).requires_grad_(True)
    b1, b2 = l1.add(1), l2.add(1)
    return _call([b1.view(-1), b2, b1.view(-1)], [l1, l2])


def _overlapping_as_strided(g):
    # a's last row starts at offset 27, b starts at 24: they overlap
    x = _randn(g, (64,))
    return (x.as_strided((4, 4), (9, 1), 0), x.as_strided((4, 4), (9, 1), 24))


def _mutate_one_of_three(m, a, b, c):
    c.mul_(2)
    return b.add(1), c.view(-1)


def _mutate_aliased_none_require_grad(m, a, b, c):
    a.mul_(2)
    return b + 1, c + 1


def _bases_out_of_order(m, a, b, c, d):
    b.add_(1)
    d.unsqueeze_(0)
    return a + c + d, b.view(-1)


def _alias_everything(m, a, b, c):
    c.mul_(2)
    b.t_()
    tmp = a + c
    out1 = tmp.view(-1)
    out2 = b.t()
    out3 = out1.unsqueeze(0)
    return out1, out2, out3


def _data_and_metadata_mutation_aliased(m, a, b):
    a.mul_(2)
    b.t_()
    return a.mul(b)


SYNTHETIC_BASE = [
    # test_input_mutation_aliases_other_input
    _SB(
        "mutate_row_aliasing_other_input",
        lambda m, a, b: (a.add_(1), a + b)[1],
        inputs=_same_row_twice((4, 2)),
        train=True,
    ),
    # test_input_mutation_aliases_other_input2
    _SB("mutate_row_other_input_is_base", lambda m, a, b: (a.add_(1), a + b)[1], inputs=_row_and_whole, train=True),
    # test_input_mutation_aliases_and_output_alias
    _SB(
        "mutate_one_alias_return_view_of_other",
        lambda m, a, b: (a.add_(1), b.view(b.shape))[1],
        inputs=_two_flat_views,
        train=True,
    ),
    # test_input_aliased_with_mutation_output_alias
    _SB("mutate_third_aliasing_first", _mutate_one_of_three, inputs=_first_and_third_alias, train=True),
    # test_input_metadata_mutation_aliases
    _SB("metadata_mutation_of_aliased_input", lambda m, a, b: (a.t_(), a + b)[1], inputs=_two_flat_views, train=True),
    # test_input_mutation_aliases_and_none_require_gradients
    _SB(
        "mutate_aliased_inputs_none_require_grad",
        _mutate_aliased_none_require_grad,
        inputs=_aliased_no_grad_plus_grad_leaf,
        train=True,
    ),
    # test_input_mutation_aliases_bases_out_of_order
    _SB("aliased_pairs_out_of_order", _bases_out_of_order, inputs=_interleaved_pairs, train=True),
    # test_input_mutation_alias_everything
    _SB("aliased_mutated_and_output_aliases", _alias_everything, inputs=_everything_inputs, train=True),
    # test_input_data_and_metadata_mutation_aliases_other_input
    _SB(
        "data_and_metadata_mutation_aliased_rows",
        _data_and_metadata_mutation_aliased,
        inputs=_same_row_twice((2, 2)),
        train=True,
    ),
    # test_input_mutation_false_aliasing (inp_callable_overlap1: real overlap)
    _SB("mutate_overlapping_as_strided_views", _mul_both_sum_copies, inputs=_overlapping_as_strided),
]

# ---------------------------------------------------------------------------------------
# set_


def _set_to_arange(m, a):
    b = torch.arange(9, dtype=a.dtype).reshape(3, 3)
    with torch.no_grad():
        a.set_(b)
    return a * b


def _set_then_mutate_source(m, a, b):
    with torch.no_grad():
        a.set_(b)
    b.mul_(2)
    return a + b


def _set_and_back(m, a):
    b = torch.arange(9, dtype=a.dtype)
    a_old = torch.ops.aten.alias.default(a)
    with torch.no_grad():
        a.set_(b)
        a.set_(a_old)
    return a + b.reshape(3, 3)


def _set_steals_view_chain(m, a, b):
    a_ = a.mul(2)
    b_ = b.mul(2)
    b_slice = b_[1].view(3, 3)
    a_.set_(b_slice)
    a_.view(-1).mul_(2)
    return a_ * b_slice


SET_ = [
    # test_input_mutation_set__input_mutation
    _SET("set_input_to_new_tensor", _set_to_arange, inputs=_derived((3, 3)), train=True),
    # test_set__and_data_mutation_good
    _SET("set_input_then_mutate_source", _set_then_mutate_source, inputs=_derived((3, 3), (3, 3)), train=True),
    # test_input_mutation_set__nop
    _SET("set_input_and_back", _set_and_back, inputs=_derived((3, 3)), train=True),
    # test_set__steals_view_chain
    _SET("set_intermediate_to_view_then_mutate", _set_steals_view_chain, inputs=_plain((3, 3), (3, 9))),
]

# ---------------------------------------------------------------------------------------
# requires_grad


def _plain_and_grad_leaf(g):
    x = _randn(g, (3, 4))
    y = _randn(g, (3, 4)).requires_grad_(True)
    return _call([x, y], [y])


def _turn_on_requires_grad(m, a, b):
    a.requires_grad_(True)
    return a.mul(3), b.mul(4)


def _view_requires_grad(m, a, b):
    flat = a.view(-1)
    flat.requires_grad_(True)
    return flat


def _no_grad_intermediate_mutation(m, x):
    y = x + 2
    with torch.no_grad():
        y.add_(2)
    return (x * 2 + y,)


def _enable_grad_matmul_then_mutate(m, x):
    with torch.enable_grad():
        y = x @ x
    y.add_(2)
    return (x.sum() + y.sum(),)


def _enable_grad_region(m, x):
    with torch.enable_grad():
        y = x + 5
        y.add_(5)
        y.add_(7)
        return (x.cos() + y.sin(),)


# ---------------------------------------------------------------------------------------
# custom_function: torch.autograd.Functions, whose own backward must be the one replayed


class _HalfGrad(torch.autograd.Function):
    """Returns its input; its backward halves the gradient (not the identity's)."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, gx):
        return gx * 0.5


class _HalfGradView(torch.autograd.Function):
    """Returns a flat view of its input; backward halves the gradient."""

    @staticmethod
    def forward(ctx, x):
        return x.view(-1)

    @staticmethod
    def backward(ctx, g):
        return (g * 0.5).view(2, 2)


class _HalfGradCopy(torch.autograd.Function):
    """Returns a copy; backward halves the gradient."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g * 0.5


class _TransposeOfSecond(torch.autograd.Function):
    """Returns a transposed view of its second input; backward scales each input's gradient."""

    @staticmethod
    def forward(ctx, x, y):
        return y.t()

    @staticmethod
    def backward(ctx, g):
        return g.t() * 2, g.t() * 3


class _ProductAndArgmax(torch.autograd.Function):
    """Two outputs, one non-differentiable; gives x no gradient at all."""

    @staticmethod
    def forward(ctx, x, y):
        index = x.argmax(-1)
        ctx.mark_non_differentiable(index)
        return x * y, index

    @staticmethod
    def backward(ctx, g, g_index):
        return None, g * 0.5


class _DoubleInPlace(torch.autograd.Function):
    """Doubles its input in place (mark_dirty); backward triples the gradient."""

    @staticmethod
    def forward(ctx, x):
        x.mul_(2)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g * 3


CUSTOM_FUNCTION = [
    # test_input_output_aliase_custom_autograd_function
    _CF("custom_function_halves_grad_of_input", lambda m, x: _HalfGrad.apply(x), inputs=_leaves((2, 2)), train=True),
    # the same on an input computed from a leaf (test_mutation=True)
    _CF("custom_function_returns_derived_input", lambda m, x: _HalfGrad.apply(x), inputs=_derived((2, 2)), train=True),
    _CF("custom_function_returns_view_of_input", lambda m, x: _HalfGradView.apply(x), inputs=_leaves((2, 2)), train=True),
    _CF("custom_function_output_used_again", lambda m, x: _HalfGrad.apply(x) * x, inputs=_leaves((2, 2)), train=True),
    _CF("custom_function_of_intermediate", lambda m, x: _HalfGrad.apply(x * 2) + 1, inputs=_leaves((2, 2)), train=True),
    _CF("custom_function_copy", lambda m, x: _HalfGradCopy.apply(x), inputs=_leaves((2, 2)), train=True),
    _CF(
        "custom_function_view_of_second_input",
        lambda m, x, y: (_TransposeOfSecond.apply(x, y), x + 1),
        inputs=_leaves((2, 3), (2, 3)),
        train=True,
    ),
    _CF(
        "custom_function_no_gradient_for_an_input",
        lambda m, x, y: _ProductAndArgmax.apply(x, y),
        inputs=_leaves((2, 3), (2, 3)),
        train=True,
    ),
    _CF("custom_function_in_place", lambda m, x: _DoubleInPlace.apply(x) + 1, inputs=_derived((2, 2)), train=True),
    _CF("custom_function_in_place_on_intermediate", lambda m, x: _DoubleInPlace.apply(x * 1) + 1,
        inputs=_leaves((2, 2)), train=True),
]

REQUIRES_GRAD = [
    # test_new_inp_requires_grad_now
    _RG("add_grad_leaf_into_plain_input", lambda m, x, y: x.add_(y), inputs=_plain_and_grad_leaf, train=True),
    # test_input_inplace_requires_grad_true
    _RG(
        "input_requires_grad_turned_on",
        _turn_on_requires_grad,
        inputs=_derived((3, 3), (3, 3), grad=(False, True)),
        train=True,
    ),
    # test_some_output_requires_grad_input_doesnt
    # (the only gradient lands on the output itself, a new leaf; b is unused, as upstream)
    _RG(
        "view_of_plain_input_made_to_require_grad",
        _view_requires_grad,
        inputs=_leaves((3, 3), (3, 3), grad=(False, True)),
        train=True,
    ),
    # test_no_grad_input_output (a requires grad, b does not)
    _RG(
        "outputs_of_grad_and_plain_inputs",
        lambda m, a, b: (a.cos(), b.cos(), a * b),
        inputs=_leaves((4,), (4,), grad=(True, False)),
        train=True,
    ),
    # test_some_outputs_dont_require_grad_view
    _RG(
        "detached_input_and_input_returned",
        lambda m, a, b: (a.detach(), b),
        inputs=_leaves((3, 3), (3, 3)),
        train=True,
    ),
    # test_aot_export_predispatch_func_simple
    _RG("mutate_intermediate_under_no_grad", _no_grad_intermediate_mutation, inputs=_derived((2, 2)), train=True),
    # test_aot_export_predispatch_func_composite_implicit
    _RG("enable_grad_matmul_then_mutate", _enable_grad_matmul_then_mutate, inputs=_derived((2, 2)), train=True),
    # test_aot_export_predispatch_with_autograd_op: the input is the leaf itself, so the
    # output requires grad even when the caller runs under no_grad
    _RG("enable_grad_region_with_mutations", _enable_grad_region, inputs=_leaves((2, 2)), train=True),
]

# ---------------------------------------------------------------------------------------
# buffer


class BufferAndTwoScalars(nn.Module):
    """test_buffer_copied_in_graph"""

    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.zeros(1))
        self.w1 = nn.Parameter(torch.randn(1))
        self.w2 = nn.Parameter(torch.randn(1))

    def forward(self, x):
        self.buf.add_(1)
        return (self.w1 * x * self.w2).sum() + self.buf.sum()


class BufferBesideMatmul(nn.Module):
    """test_buffer_copied_in_graph_with_different_shapes"""

    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.ones(4, 4))
        self.w = nn.Parameter(torch.randn(4, 2))

    def forward(self, x):
        self.buf.add_(1)
        return (self.w @ x).sum() + self.buf.sum()


def _buffer_add_sum(m, x):
    m.foo.add_(4)
    return (x.sum() + m.foo.sum(),)


def _input_and_buffer_mutation(m, x, y):
    y.add_(4)
    m.buffer1.add_(5)
    return (x.cos().sum() + y.sin().sum(), m.buffer1.sum())


def _buffer_add_returned(m, x):
    y = m.buffer.add_(3)
    return x.sum() + m.buffer.sum(), y


BUFFER = [
    # test_buffer_copied_in_graph
    _BUF("buffer_add_beside_scalar_params", module=BufferAndTwoScalars, inputs=_derived((1,), how="clone"), train=True),
    # test_buffer_copied_in_graph_with_different_shapes
    _BUF("buffer_add_beside_matmul", module=BufferBesideMatmul, inputs=_derived((2, 4), how="clone"), train=True),
    # test_aot_export_predispatch_buffer_mutation_metadata
    _BUF("buffer_add_then_sum", _buffer_add_sum, inputs=_plain((2, 2)), buffers={"foo": torch.zeros(2, 2)}),
    # test_aot_export_forward_mutation_multiple_mut
    _BUF(
        "input_and_buffer_mutated",
        _input_and_buffer_mutation,
        inputs=_plain((3, 4), (3, 4)),
        buffers={"buffer1": torch.ones(3, 4)},
    ),
    # test_real_weights_in_symbolic_mode_with_inplace_ops (without the resize_): the
    # in-place op's result (the buffer itself) is returned
    _BUF(
        "buffer_add_result_returned",
        _buffer_add_returned,
        inputs=_plain((2, 5)),
        buffers={"buffer": torch.ones(4, 5)},
    ),
]

# ---------------------------------------------------------------------------------------
# batch_norm


class BatchNorm1dOnly(nn.Module):
    """test_buffer_batch_norm"""

    def __init__(self):
        super().__init__()
        self.m = nn.BatchNorm1d(4)

    def forward(self, x):
        return self.m(x)


class ConvBatchNorm(nn.Module):
    """test_aot_export_predispatch_conv_and_bn"""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 3, 1, 1)
        self.bn = nn.BatchNorm2d(3)

    def forward(self, x):
        return (self.bn(self.conv(x)),)


class ConvBatchNormReluLoss(nn.Module):
    """test_aot_export_module_joint"""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 3, 1, 1)
        self.bn = nn.BatchNorm2d(3)

    def forward(self, x):
        user_out = F.relu(self.bn(self.conv(x)))
        return user_out.sum(), user_out.detach()


class BatchNorm2dOnly(nn.Module):
    """test_batchnorm_inference"""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return self.bn(x)


def _batch_norm_stats_inputs(g):
    x = _randn(g, (2, 3, 2, 2)).requires_grad_(True)
    w = _randn(g, (3,)).requires_grad_(True)
    b = _randn(g, (3,)).requires_grad_(True)
    running_mean = _randn(g, (3,))
    running_var = torch.rand(3, generator=g) + 0.5
    return _call([x.add(1), w.add(1), b.add(1), running_mean, running_var], [x, w, b])


BATCH_NORM = [
    # test_buffer_batch_norm
    _BN("batchnorm1d_module", module=BatchNorm1dOnly, inputs=_derived((3, 4), how="clone"), train=True),
    # test_aot_export_predispatch_conv_and_bn
    _BN("conv_then_batchnorm2d", module=ConvBatchNorm, inputs=_plain((1, 1, 3, 3)), train=True),
    # test_aot_export_module_joint
    _BN("conv_batchnorm_relu_loss_and_detached", module=ConvBatchNormReluLoss, inputs=_plain((1, 1, 3, 3)), train=True),
    # test_batchnorm_inference (the eval check runs the module in eval mode: no stats update)
    _BN("batchnorm2d_inference", module=BatchNorm2dOnly, inputs=_plain((2, 4, 2, 2))),
    # test_input_mutation_batchnorm: running stats are inputs, mutated in place
    _BN(
        "batch_norm_running_stats_as_inputs",
        lambda m, x, w, b, rm, rv: torch._native_batch_norm_legit(x, w, b, rm, rv, True, 0.5, 1e-5),
        inputs=_batch_norm_stats_inputs,
        train=True,
    ),
]

# ---------------------------------------------------------------------------------------
# random


def _dropout_eval_returns_input(m, x):
    y = torch.ops.aten.dropout.default(x, 0.1, False)  # train=False: returns x itself
    y.add_(1)
    return (y,)


def _rand_like_mutation(m, a):
    noise = torch.rand_like(a)
    a.mul_(noise)
    return a + torch.randn(a.shape)


RANDOM = [
    # test_preserve_random
    _RAND("dropout_plus_input", lambda m, x: F.dropout(x, 0.5) + x, inputs=_derived((4,)), train=True),
    # test_aot_export_ban_dropout_mut_pre_dispatch
    _RAND("aten_dropout_no_train_then_add_", _dropout_eval_returns_input, inputs=_plain((2, 2))),
    # test_preserve_random, with rand_like/randn and an input mutated by random values
    _RAND("rand_like_mutation_and_randn", _rand_like_mutation, inputs=_derived((3, 4)), train=True),
]

# ---------------------------------------------------------------------------------------

CASES = [
    *INPUT_MUTATION,
    *INPUT_OUTPUT_VIEW,
    *OUTPUT_ALIASES,
    *DUPE_ARG,
    *SYNTHETIC_BASE,
    *SET_,
    *REQUIRES_GRAD,
    *CUSTOM_FUNCTION,
    *BUFFER,
    *BATCH_NORM,
    *RANDOM,
]

BY_NAME = {c.name: c for c in CASES}
assert len(BY_NAME) == len(CASES), "case names must be unique"
