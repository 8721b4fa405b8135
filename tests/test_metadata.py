"""Captured mutation/alias metadata, per category, against AOTAutograd's own analysis.

Each program is captured by aotc, then the same program is analysed by AOTAutograd's
`run_functionalized_fw_and_collect_metadata` directly; both must agree, and both must
say what eager PyTorch does (checked by the explicit expectations).
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.utils._pytree as pytree
from torch import nn

from aotc._torch_compat import reference_metadata
from aotc.capture import CaptureOptions, capture


class WithWeight(nn.Module):
    """A Linear so that something requires grad, plus the program under test."""

    def __init__(self, body):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.body = body

    def forward(self, x, y):
        return self.body(self, x, y)


def data_mutation(m, x, y):
    x.mul_(2)
    return m.lin(x) + y


def metadata_mutation(m, x, y):
    y.t_()
    return m.lin(x) + y


def no_grad_mutation(m, x, y):
    with torch.no_grad():
        y.add_(1)
    return m.lin(x) * y


def output_is_input(m, x, y):
    return m.lin(x), y


def view_of_input(m, x, y):
    return m.lin(x), y.view(-1)


def view_of_intermediate(m, x, y):
    h = m.lin(x) + y
    return h.transpose(0, 1)


def view_and_its_base(m, x, y):
    h = m.lin(x) + y
    return h, h.transpose(0, 1)


def two_outputs_one_base(m, x, y):
    h = m.lin(x) * 2
    return h[0], h[1]


def same_tensor_twice(m, x, y):
    x.add_(1)
    return m.lin(x) + y


class BufferMutation(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("count", torch.zeros(4))

    def forward(self, x, y):
        self.count.add_(x.sum(0))
        return self.lin(x) + y


def _inputs(name: str, dup: bool):
    # metadata_mutation transposes y, so y is square for `lin(x) + y` to still work
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4 if name == "metadata_mutation" else 3, 4, generator=g)
    y = x if dup else torch.randn(*x.shape, generator=g)
    return x, y


CASES = {
    "data_mutation": (WithWeight(data_mutation), False),
    "metadata_mutation": (WithWeight(metadata_mutation), False),
    "no_grad_mutation": (WithWeight(no_grad_mutation), False),
    "buffer_mutation": (BufferMutation(), False),
    "output_is_input": (WithWeight(output_is_input), False),
    "view_of_input": (WithWeight(view_of_input), False),
    "view_of_intermediate": (WithWeight(view_of_intermediate), False),
    "view_and_its_base": (WithWeight(view_and_its_base), False),
    "two_outputs_one_base": (WithWeight(two_outputs_one_base), False),
    "same_tensor_twice": (WithWeight(same_tensor_twice), True),
}


def _reference(model, args):
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    names = [*params, *buffers]
    flat = [*params.values(), *buffers.values(), *args]

    def fn(*flat_args):
        state = dict(zip(names, flat_args[: len(names)]))
        out = torch.func.functional_call(model, state, tuple(flat_args[len(names):]))
        return pytree.tree_leaves(out)

    return reference_metadata(fn, flat)


@pytest.fixture(scope="module")
def captured():
    results = {}
    for name, (model, dup) in CASES.items():
        x, y = _inputs(name, dup)
        results[name] = capture(model, (x, y), {}, options=CaptureOptions(mode="autograd"))
    return results


def _eager(model, name: str, dup: bool):
    """What eager does to each state tensor and user input (by name): (data changed,
    layout changed); and per output: "is_input", "alias_of_input" or None."""
    model = copy.deepcopy(model)
    x, y = _inputs(name, dup)
    tensors = {**dict(model.named_parameters()), **dict(model.named_buffers()), "x": x, "y": y}

    def look(t):
        numel = t.untyped_storage().nbytes() // t.element_size()
        return t.detach().as_strided((numel,), (1,), 0).clone(), (t.shape, t.stride(), t.storage_offset())

    before = {n: look(t) for n, t in tensors.items()}
    outputs = pytree.tree_leaves(model(x, y))
    after = {n: look(t) for n, t in tensors.items()}
    changed = {n: (not torch.equal(before[n][0], after[n][0]), before[n][1] != after[n][1]) for n in tensors}
    inputs = [x, y]
    kinds = [
        "is_input" if any(o is i for i in inputs)
        else "alias_of_input" if any(o.untyped_storage().data_ptr() == i.untyped_storage().data_ptr() for i in inputs)
        else None
        for o in outputs
    ]
    return changed, kinds


@pytest.mark.parametrize("name", list(CASES))
def test_metadata_matches_aotautograd(name, captured):
    model, dup = CASES[name]
    x, y = _inputs(name, dup)
    ours = captured[name].programs["forward"]
    ref = _reference(model, (x, y))
    # AOTAutograd's per-argument info, named by the arguments _reference passed in that order
    ref_names = [*dict(model.named_parameters()), *dict(model.named_buffers()), "x", "y"]
    ref_by_name = dict(zip(ref_names, ref.input_info, strict=True))
    # aotc keeps one input per distinct tensor: a duplicate user input is dropped
    dropped = {["x", "y"][int(k)] for k in ours.duplicate_user_inputs}
    assert sorted(i.name for i in ours.inputs) == sorted(n for n in ref_names if n not in dropped)
    eager_changes, eager_outputs = _eager(model, name, dup)
    for mine in ours.inputs:
        theirs = ref_by_name[mine.name]
        assert mine.mutates_data == theirs.mutates_data, mine.name
        assert mine.mutates_metadata == theirs.mutates_metadata, mine.name
        assert mine.mutation_type == theirs.mutation_type.name, mine.name
        assert mine.requires_grad == theirs.requires_grad, mine.name
        assert mine.mutations_under_no_grad_or_inference_mode == theirs.mutations_under_no_grad_or_inference_mode
        assert mine.mutates_storage_metadata == theirs.mutates_storage_metadata, mine.name
        # torch 2.14's flag; an earlier torch has none, and aotc records False
        assert mine.mutation_is_shallow_copy_data == getattr(theirs, "mutation_is_shallow_copy_data", False)
        # and what eager did to the tensor
        assert (mine.mutates_data, mine.mutates_metadata) == eager_changes[mine.name], mine.name
    assert len(ours.outputs) == len(ref.output_info) == len(eager_outputs)
    for i, (mine, theirs, eager_kind) in enumerate(zip(ours.outputs, ref.output_info, eager_outputs, strict=True)):
        assert mine.output_type == theirs.output_type.name
        assert mine.base_idx == theirs.base_idx
        assert mine.requires_grad == theirs.requires_grad
        if eager_kind is not None:
            assert mine.output_type == eager_kind, f"output {i}"
        else:
            assert mine.output_type not in ("is_input", "alias_of_input"), f"output {i}"


def _input(meta, name):
    return next(i for i in meta.inputs if i.name == name)


def test_data_mutation_of_user_input(captured):
    x = _input(captured["data_mutation"].programs["forward"], "x")
    assert (x.mutates_data, x.mutates_metadata, x.mutation_type) == (True, False, "MUTATED_OUT_GRAPH")
    sig = captured["data_mutation"].graphs["forward"].signature
    assert sig.outputs[0].name == "mutated:x" and sig.outputs[0].role == "input_mutation"


def test_metadata_mutation_is_recorded(captured):
    y = _input(captured["metadata_mutation"].programs["forward"], "y")
    assert (y.mutates_data, y.mutates_metadata, y.mutation_type) == (False, True, "MUTATED_OUT_GRAPH")


def test_mutation_under_no_grad(captured):
    y = _input(captured["no_grad_mutation"].programs["forward"], "y")
    assert y.mutates_data and y.mutations_under_no_grad_or_inference_mode


def test_buffer_mutation(captured):
    meta = captured["buffer_mutation"].programs["forward"]
    count = _input(meta, "count")
    assert count.kind == "buffer" and count.mutation_type == "MUTATED_OUT_GRAPH"
    assert _input(meta, "x").mutation_type == "NOT_MUTATED"


def test_output_is_input(captured):
    out = captured["output_is_input"].programs["forward"].outputs[1]
    assert out.output_type == "is_input" and out.base == "y"


def test_view_of_input(captured):
    out = captured["view_of_input"].programs["forward"].outputs[1]
    assert out.output_type == "alias_of_input" and out.base == "y"
    assert out.view_replay == ["aten.view.default([-1])"]


def test_view_of_intermediate(captured):
    # The only view of a base nobody else sees: AOTAutograd returns it as a plain output.
    out = captured["view_of_intermediate"].programs["forward"].outputs[0]
    assert out.output_type == "unsafe_view_alias" and out.base is None


def test_view_of_intermediate_that_is_also_an_output(captured):
    base, view = captured["view_and_its_base"].programs["forward"].outputs
    assert base.output_type == "non_alias"
    assert view.output_type == "alias_of_intermediate_base_is_user_output"
    assert view.base == "output[0]"
    assert view.view_replay == ["aten.transpose.int(0, 1)"]


def test_two_outputs_share_one_base(captured):
    meta = captured["two_outputs_one_base"].programs["forward"]
    first, second = meta.outputs
    assert first.output_type.startswith("alias_of_intermediate")
    assert second.output_type.startswith("alias_of_intermediate")
    assert first.base == second.base == "intermediate_base[0]"
    assert meta.num_intermediate_bases == 1


def test_same_tensor_twice(captured):
    c = captured["same_tensor_twice"]
    meta = c.programs["forward"]
    assert meta.duplicate_user_inputs == {"1": 0}
    user = [i for i in meta.inputs if i.kind == "user_input"]
    assert [i.name for i in user] == ["x"] and user[0].mutation_type == "MUTATED_OUT_GRAPH"
    assert [u.name for u in c.user_inputs] == ["x", "y"]
