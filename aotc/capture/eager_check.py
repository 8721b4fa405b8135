"""One eager call at capture, to check what the graphs' metadata says against what eager did.

Capture runs the model once more, eagerly, on copies of the example inputs (related to
each other as the originals are) and a copy of the model, and records what a caller would
see: which inputs changed value or layout, which were switched to require grad, which
outputs are an input object or share its memory. Capture uses it for what AOTAutograd
does not record (an output that is the caller's own input when the graph saw only a
synthetic base; `requires_grad_()` on an input), and refuses a capture whose metadata
disagrees with it: a bundle must never replay something other than what eager did.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

import torch

from aotc import _torch_compat as tc
from aotc._torch_compat import pytree
from aotc.bundle.schema import ProgramMeta
from aotc.capture.grad_paths import GradPaths, target_nodes, walk
from aotc.capture.module_copy import copy_module
from aotc.contract.aliasing import clone_like, geometry
from aotc.errors import CaptureError


@dataclass(frozen=True)
class EagerCall:
    """What one eager call did to its flat user inputs, and what its outputs were."""

    data_mutated: frozenset[int]
    metadata_mutated: tuple[int, ...]
    requires_grad_set: tuple[int, ...]  # inputs that forward switched to requires_grad=True
    same_as_inputs: dict[int, int]  # output index -> the input it is
    shares_with_inputs: dict[int, frozenset[int]]  # output index -> inputs whose memory it views
    view_offsets: dict[int, int]  # output index -> its storage offset less its first such input's
    output_requires_grad: dict[int, bool]
    input_requires_grad: tuple[bool | None, ...]  # before the call
    # leaves that require grad the call changed in place: only behind autograd's back
    # (.detach(), .data, no_grad) can eager do that
    leaves_mutated: frozenset[int] = frozenset()
    # inputs the call changed in place where autograd saw it (they have a new grad_fn)
    visible_mutations: frozenset[int] = frozenset()
    # which inputs each output's gradient reaches (training calls only)
    grad_paths: GradPaths | None = None


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.is_floating_point or a.dtype.is_complex:
        return bool(((a == b) | (a.isnan() & b.isnan())).all())
    return torch.equal(a, b)


def observe(program: torch.nn.Module, flat_user: list, in_spec, training: bool) -> EagerCall:
    """Run a copy of `program` on copies of `flat_user` and record what it did."""
    inputs = clone_like(flat_user)
    values = [t.detach().clone() if isinstance(t, torch.Tensor) else None for t in inputs]
    layouts = [geometry(t) if isinstance(t, torch.Tensor) else None for t in inputs]
    flags = [t.requires_grad if isinstance(t, torch.Tensor) else None for t in inputs]
    grad_fns = [t.grad_fn if isinstance(t, torch.Tensor) else None for t in inputs]
    args, kwargs = pytree.tree_unflatten(inputs, in_spec)
    program = copy_module(program)
    params = dict(program.named_parameters())
    leaves, nodes = target_nodes(inputs, params)
    attributes = python_state(program)
    try:
        with torch.set_grad_enabled(training):
            outputs = pytree.tree_leaves(program(*args, **kwargs))
    except Exception as e:
        raise CaptureError(
            f"{type(program).__name__} failed when run eagerly on copies of its example inputs: "
            f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        ) from e
    _check_python_state(program, attributes, flat_user, in_spec, training)
    tensors = [(i, t) for i, t in enumerate(inputs) if isinstance(t, torch.Tensor)]
    same, shares, offsets = {}, {}, {}
    for k, out in enumerate(outputs):
        if not isinstance(out, torch.Tensor):
            continue
        same_as = next((i for i, t in tensors if out is t), None)
        if same_as is not None:
            same[k] = same_as
        ptr = out.untyped_storage().data_ptr()
        viewed = frozenset(i for i, t in tensors if t.untyped_storage().data_ptr() == ptr)
        if viewed:
            shares[k] = viewed
            offsets[k] = out.storage_offset() - inputs[min(viewed)].storage_offset()
    data_mutated = frozenset(
        i for i, t in tensors if geometry(t) == layouts[i] and not _same_values(t.detach(), values[i])
    )
    paths = None
    if training:
        roots = {("output", k): o for k, o in enumerate(outputs) if isinstance(o, torch.Tensor) and o.requires_grad}
        roots |= {("input", i): t for i, t in tensors if t.grad_fn is not None and t.grad_fn is not grad_fns[i]}
        paths = walk(roots, leaves, nodes, tuple(params))
    return EagerCall(
        data_mutated=data_mutated,
        metadata_mutated=tuple(i for i, t in tensors if geometry(t) != layouts[i]),
        # requires_grad_() leaves a leaf; an in-place op with a tensor that requires grad does not
        requires_grad_set=tuple(i for i, t in tensors if t.requires_grad and t.is_leaf and not flags[i]),
        same_as_inputs=same,
        shares_with_inputs=shares,
        view_offsets=offsets,
        output_requires_grad={k: out.requires_grad for k, out in enumerate(outputs) if isinstance(out, torch.Tensor)},
        input_requires_grad=tuple(flags),
        leaves_mutated=frozenset(i for i in data_mutated if flags[i] and grad_fns[i] is None),
        visible_mutations=frozenset(i for i, t in tensors if grad_fns[i] is not None and t.grad_fn is not grad_fns[i]),
        grad_paths=paths,
    )


def _check_python_state(program, before: dict, flat_user: list, in_spec, training: bool) -> None:
    """Refuse a forward that changes Python attributes from call to call (a step counter):
    a graph holds the values of the call it traced. An attribute set from the input's
    shape the same way every time (transformers' Swin sets `shift_size` from the image
    size) changes on the first call only, and is accepted: a second call leaves it."""
    after = python_state(program)
    if not [name for name, value in after.items() if before.get(name, value) != value]:
        return
    args, kwargs = pytree.tree_unflatten(clone_like(flat_user), in_spec)
    with torch.set_grad_enabled(training):
        program(*args, **kwargs)
    changed = [name for name, value in python_state(program).items() if after.get(name, value) != value]
    if changed:
        raise CaptureError(
            f"{type(getattr(program, 'model', program)).__name__}.forward changes Python attribute(s) "
            f"{', '.join(changed)} on every call: a graph holds the values of the call it traced (torch.export "
            "bakes them in too), so the bundle would not change them from call to call as eager does. Keep such "
            "state in buffers (register_buffer)."
        )


_PLAIN = (bool, int, float, str, type(None))


def python_state(program: torch.nn.Module) -> dict[str, object]:
    """Every module attribute that is a number, bool or str (or a tuple, list or dict of
    them), by path: what forward may change behind a graph's back."""
    state = {}
    for prefix, module in program.named_modules():
        for name, value in vars(module).items():
            if name.startswith("_") or name == "training":
                continue
            leaves = pytree.tree_leaves(value) if isinstance(value, (tuple, list, dict)) else [value]
            if leaves and all(isinstance(v, _PLAIN) for v in leaves):
                path = f"{prefix.removeprefix('model.').removeprefix('model')}.{name}".lstrip(".")
                state[path] = copy.deepcopy(value)  # a dict forward updates in place is compared too
    return state


def outputs_with_history(program: torch.nn.Module, flat_user: list, in_spec) -> list[int] | None:
    """For an inference capture (traced without grad): the user outputs eager gives a
    grad_fn when called under grad mode with every floating-point parameter requiring
    grad. None when eager cannot run so (the runtime then assumes every float output)."""
    model = copy_module(program)
    for p in model.parameters():
        if p.is_floating_point() or p.is_complex():
            p.requires_grad_(True)
    args, kwargs = pytree.tree_unflatten(clone_like(flat_user), in_spec)
    try:
        with torch.enable_grad():
            outputs = pytree.tree_leaves(model(*args, **kwargs))
    except Exception:  # eager raises under grad mode where no_grad runs (in-place on a leaf)
        return None
    return [k for k, o in enumerate(outputs) if isinstance(o, torch.Tensor) and o.grad_fn is not None]


def disagreements(meta: ProgramMeta, eager: EagerCall, user_names: list[str], duplicates: dict[int, int],
                  differentiable: bool) -> list[str]:
    """Where the captured program's metadata contradicts the eager call, in words.
    `differentiable`: the program runs under autograd (a forward+backward bundle)."""
    problems = []
    on_base = {m.input for group in meta.aliased_inputs if group.synthetic_base for m in group.members}
    by_name = {i.name: i for i in meta.inputs if i.kind == "user_input"}
    for idx in sorted(eager.data_mutated | set(eager.metadata_mutated)):
        if idx in on_base:
            continue  # the graph sees their base, which carries the mutation
        info = by_name.get(user_names[duplicates.get(idx, idx)])
        if info is None:
            continue
        if idx in eager.data_mutated and not info.mutates_data:
            problems.append(f"eager changes the values of input '{user_names[idx]}' in place; the graph does not")
        if idx in eager.metadata_mutated and not info.mutates_metadata:
            problems.append(f"eager changes the shape or strides of input '{user_names[idx]}'; the graph does not")
    same_recorded = {int(k) for k in meta.outputs_same_as_inputs}
    for out in meta.outputs:
        if out.index in same_recorded:
            continue
        aliases = out.output_type in ("alias_of_input", "is_input") or (
            out.output_type == "custom_function_view" and out.base_idx is not None
        )
        if out.index in eager.shares_with_inputs and not aliases and not on_base & eager.shares_with_inputs[out.index]:
            names = ", ".join(f"'{user_names[i]}'" for i in sorted(eager.shares_with_inputs[out.index]))
            problems.append(f"output {out.index} shares memory with input {names} in eager; the graph returns a copy")
        if out.index in eager.same_as_inputs and out.output_type != "is_input":
            problems.append(f"output {out.index} is input '{user_names[eager.same_as_inputs[out.index]]}' itself in eager")
        if not aliases and eager.output_requires_grad.get(out.index, False) and not differentiable:
            problems.append(
                f"output {out.index} requires grad in eager even under no_grad (forward enables grad "
                "itself); an inference graph cannot give it a gradient: export forward+backward graphs (--autograd)"
            )
    return problems


def hidden_leaf_mutations(meta: ProgramMeta, eager: EagerCall, user_names: list[str]) -> ProgramMeta:
    """A leaf that requires grad and that eager changed in place was changed behind
    autograd (`a.detach().mul_(2)`, `a.data`), which AOTAutograd does not always flag: so
    flagged, the runtime writes it back without history, as eager did."""
    changed = {user_names[i] for i in eager.leaves_mutated}
    inputs = [
        dataclasses.replace(info, mutations_hidden_from_autograd=True)
        if info.kind == "user_input" and info.name in changed and info.mutates_data else info
        for info in meta.inputs
    ]
    return dataclasses.replace(meta, inputs=inputs)


def differentiable_mutations(meta: ProgramMeta, eager: EagerCall, user_names: list[str],
                             tangents: set[str]) -> tuple[ProgramMeta, list[str]]:
    """A custom Function's forward runs under no_grad, so AOTAutograd takes the input it
    changes in place (`ctx.mark_dirty`) as changed without grad; eager's autograd sees the
    change. Flag such a mutation differentiable, where the backward graph takes a gradient
    for it (`tangents`: names of the mutated-input outputs it does); else a problem."""
    changed = {user_names[i] for i in eager.visible_mutations}
    inputs, problems = [], []
    for info in meta.inputs:
        if info.kind == "user_input" and info.name in changed and info.mutates_data and (
            info.mutations_hidden_from_autograd or info.mutations_under_no_grad_or_inference_mode
        ):
            if f"mutated:{info.name}" not in tangents:
                problems.append(f"eager changes input '{info.name}' in place under autograd; the graph does so without grad")
            info = dataclasses.replace(info, mutations_hidden_from_autograd=False,
                                       mutations_under_no_grad_or_inference_mode=False)
        inputs.append(info)
    return dataclasses.replace(meta, inputs=inputs), problems


def custom_function_views(meta: ProgramMeta, eager: EagerCall, views: dict[int, int]) -> ProgramMeta:
    """Outputs of custom autograd.Functions that view one user input in eager (`views`:
    output -> graph input position) get that input as their base: the runtime returns
    them from its autograd.Function as views of it, so the Function's backward is kept."""
    outputs = []
    for out in meta.outputs:
        if out.output_type == "custom_function_view" and out.index in views and out.index in eager.view_offsets:
            base_idx = views[out.index]
            out = dataclasses.replace(out, base_idx=base_idx, base=meta.inputs[base_idx].name,
                                      view_offset=eager.view_offsets[out.index])
        outputs.append(out)
    return dataclasses.replace(meta, outputs=outputs)


def eager_output_requires_grad(meta: ProgramMeta, eager: EagerCall, user_names: list[str]) -> ProgramMeta:
    """Outputs that alias a user input require grad as eager's did (AOTAutograd misses a
    `requires_grad_()` on such a view), so the runtime rebuilds them that way; only where
    the graph was traced with that input requiring grad as eager's did."""
    position = {name: i for i, name in enumerate(user_names)}
    outputs = []
    for out in meta.outputs:
        base = meta.inputs[out.base_idx] if out.output_type == "alias_of_input" else None
        user = position.get(base.name) if base is not None and base.kind == "user_input" else None
        if user is not None and out.index in eager.output_requires_grad and (
            eager.input_requires_grad[user] == base.requires_grad
        ):
            out = dataclasses.replace(out, requires_grad=eager.output_requires_grad[out.index])
        outputs.append(out)
    return dataclasses.replace(meta, outputs=outputs)


def grad_mode_leak(ep, program: torch.nn.Module, args, kwargs) -> bool | None:
    """The grad mode forward leaves behind, if it changes it (None if not).

    Eager lets `torch.set_grad_enabled(False)` in forward leak to the caller, and
    AOTAutograd's runtime replays that; torch.export scopes it inside the graph. When the
    graph shows a grad-mode region, one forward on fake tensors tells what eager leaves.
    """
    if not any("set_grad_enabled" in str(n.target) for n in ep.graph.nodes if n.op == "call_function"):
        return None
    mode = tc.FakeTensorMode(allow_non_fake_inputs=True)
    fake_args, fake_kwargs = pytree.tree_map_only(torch.Tensor, mode.from_tensor, (args, kwargs))
    # the module's own tensors are swapped for fakes too: an in-place op on a real buffer
    # under fake mode would still record autograd history on it
    state = {
        k: mode.from_tensor(v)
        for k, v in [*program.named_parameters(remove_duplicate=False), *program.named_buffers(remove_duplicate=False)]
    }
    before = torch.is_grad_enabled()
    try:
        with mode:
            torch.func.functional_call(program, state, fake_args, fake_kwargs, tie_weights=True, strict=False)
        after = torch.is_grad_enabled()
    except Exception:  # data-dependent code cannot run on fakes; assume no leak
        after = before
    finally:
        torch.set_grad_enabled(before)
    return after if after != before else None
