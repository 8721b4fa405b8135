"""The module `aotc.load` returns: weights as real Parameters/buffers, and per call the
wrapper stack of DESIGN.md (signature -> dedupe -> alias guard -> autograd -> epilogue ->
backend), each layer built once at load and skipped when the metadata says it has nothing
to do. Each program's inputs, guards and epilogue are built in runtime/program;
`train_step`'s work is in runtime/joint_step.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from aotc import _torch_compat as tc
from aotc._torch_compat import pytree
from aotc.bundle.files import Bundle
from aotc.contract.aliasing import StrideGuard, dense_strides
from aotc.contract.ambient import AmbientGuard, check_inference_grad, check_traced_without_grad
from aotc.contract.call_form import CallForm, describe_call, describe_spec
from aotc.contract.optimizers import for_module
from aotc.contract.more_outputs import needs_finish, unflatten_outputs
from aotc.contract.outputs import load_spec
from aotc.errors import AotcError, FrozenWeightsError, GraphRunError, InputError, ModeError
from aotc.runtime.autograd_fn import GraphFunction, TrainingGraphs, with_refusing_history
from aotc.runtime.fast_path import MISS, FastPath, layouts_checkable
from aotc.runtime.inputs import CallStructure, build_checks
from aotc.runtime.joint_step import joint_step
from aotc.runtime.loaded_program import Program, with_constants
from aotc.runtime.state import FrozenState, populate, refusal, slot_getter
from aotc.runtime.subclasses import SubclassLayer

Graph = Callable[..., tuple]
_global_hooks = tc.module_hooks_registered()
_APPLY = tc.function_apply(GraphFunction)


def _dense(t: torch.Tensor) -> bool:
    """Whether `t` covers its memory exactly once (some order of its dims is row-major)."""
    return t.stride() == dense_strides(t.shape, StrideGuard.of(list(t.shape), list(t.stride()), True).order)


class LoadedModule(nn.Module):
    """A bundle as an nn.Module. Call it like the original model; `train_step` for joint bundles."""

    def __init__(self, bundle: Bundle, graphs: dict[str, Graph], device: torch.device, mode: str, backend: str,
                 trusted_subclasses=()):
        super().__init__()
        self.bundle_path = str(bundle.path)
        self.backend = backend
        self.device = device
        sig, meta = bundle.signature, bundle.metadata
        state_roles = {}
        requires_grad = {}
        for program in meta.programs.values():
            for inp in program.inputs:
                if inp.kind in ("parameter", "buffer"):
                    state_roles[inp.name] = inp.kind
                    requires_grad[inp.name] = inp.requires_grad
        stored = bundle.weights()
        weights = {name: stored[name].to(device) for name in state_roles}
        self._subclasses = None
        if meta.subclasses is not None:
            layer = self._subclasses = SubclassLayer(meta.subclasses, trusted_subclasses)
            weights = layer.outer_weights(weights)
            for fqn, names in layer.inner_state.items():
                state_roles[fqn] = state_roles[names[0]]
                requires_grad[fqn] = layer.state_requires_grad[fqn]
        frozen = [kind for kind, g in graphs.items() if getattr(g, "frozen", False)]
        graphs = {kind: with_constants(g, sig.graphs[kind], stored, device) for kind, g in graphs.items()}
        populate(
            self,
            weights,
            parameters={k for k, r in state_roles.items() if r == "parameter"},
            requires_grad=requires_grad,
            aliases=sig.state_aliases,
            non_persistent=set(sig.non_persistent_buffers),
        )
        if self._subclasses is not None:
            self._subclasses.bind({fqn: slot_getter(self, fqn) for fqn in self._subclasses.state})
        self._in_spec = load_spec(sig.in_spec)
        self._keywords = CallStructure.of(self._in_spec)
        self._call_form = CallForm.of(self._in_spec, [u.name for u in sig.user_inputs],
                                      [c.name for c in sig.constant_inputs])
        # Fast path: forward(*tensors) with no kwargs needs no pytree flattening.
        plain = pytree.tree_flatten((tuple(range(len(sig.user_inputs))), {}))[1]
        self._plain_arity = len(sig.user_inputs) if plain == self._in_spec else -1
        self._out_spec = load_spec(sig.out_spec)
        # torch.return_types and dataclass outputs are rebuilt as the caller's classes
        self._unflatten_out = unflatten_outputs if needs_finish(self._out_spec) else pytree.tree_unflatten
        self._out_is_leaf = self._out_spec.is_leaf()
        n_out = self._out_spec.num_leaves
        self._out_is_tuple = self._out_spec == pytree.tree_flatten(tuple(range(n_out)))[1]
        self._checks = build_checks(meta, sig.user_inputs, self._call_form.int_offsets())
        self._ambient = AmbientGuard(meta.ambient, device.type, str(bundle.path))
        self._user_meta = meta.user_inputs
        self._captured_training = meta.training
        self._graph_kinds = list(sig.graphs)
        self._programs = {
            kind: Program(self, kind, sig.graphs[kind], program_meta, meta.training, sig.user_inputs, graphs[kind],
                          meta.user_inputs, self._subclasses)
            for kind, program_meta in meta.programs.items()
        }
        folded = [s.target for kind in frozen for s in sig.graphs[kind].inputs if s.role in ("parameter", "buffer")]
        self._frozen = FrozenState(self, folded, self.bundle_path) if frozen else None
        self._training_graphs = None  # a forward bundle with no backward has nothing to differentiate
        if "backward" in graphs:
            mutated = frozenset(m.primal for m in self._programs["forward"].epilogue.mutations)
            self._training_graphs = TrainingGraphs.build(
                graphs["forward"], graphs["backward"], sig.graphs["forward"], sig.graphs["backward"], mutated,
                meta.programs["forward"],
            )
        # a joint bundle that carries its optimizer: torch.optim's, holding its state
        self.optimizer, self._fused = for_module(self, bundle, meta.optimizer) if meta.optimizer else (None, None)
        self.generation = bundle.manifest.generation  # set for prefill/decode bundles
        self._fast = self._fast_path(graphs.get("inference"), sig.graphs.get("inference"))
        if self._fast is not None and self._ambient_accepts():
            self._fast.accept_current_state()
            with torch.no_grad():  # how a served model is called
                self._fast.accept_current_state()
        self.train(mode == "train")

    def _ambient_accepts(self) -> bool:
        try:
            if self._ambient.active:
                self._ambient.check()
        except AotcError:
            return False
        return True

    def _fast_path(self, graph, signature) -> FastPath | None:
        """The inference program's fast path, when its backend offers a bare runner (aoti)
        and its calls need no more than FastPath checks; None otherwise."""
        program = self._programs.get("inference")
        run = getattr(graph, "fast_call", None)
        if program is None or run is None or self._captured_training or self._subclasses is not None:
            return None
        n = len(self._checks)
        layouts = (graph.layouts or [None] * len(signature.inputs))[-n:] if n else []
        epilogue, guard = program.epilogue, program.guard
        if (not program._layout_simple or program._user != list(range(n)) or program.static_shapes
                or program.set_requires_grad or guard.duplicates or guard.groups or epilogue.user_metadata
                or epilogue.grad_enabled_mutation is not None or self._plain_arity != n
                or any(s.role == "constant" for s in signature.inputs) or not layouts_checkable(layouts)):
            return None
        examples = [
            torch.empty_strided(c.shape, meta.stride, dtype=c.dtype, device=self.device)
            for c, meta in zip(self._checks, self._user_meta)
        ]
        if guard.mutated and not all(_dense(t) for t in examples):
            return None  # FastPath's overlap test takes each input's memory as [data_ptr, + nbytes)
        dynamic = [(i, d, symbol, lo, hi) for i, c in enumerate(self._checks) for d, (symbol, lo, hi) in c.dynamic.items()]
        plans, spec, unflatten = epilogue.outputs, self._out_spec, self._unflatten_out
        if not epilogue.trivial:
            def finish(primals, outs, args):
                return self._unflatten(epilogue.apply(primals, outs, args))
        elif self._out_is_leaf:
            position = plans[0].output

            def finish(primals, outs, args):
                return outs[position]
        else:
            def finish(primals, outs, args):
                return unflatten([outs[p.output] for p in plans], spec)
        return FastPath(run, examples, layouts, dynamic, program._state, guard.mutated, finish,
                        keeps_primals=not epilogue.trivial)

    def __call__(self, *args, **kwargs):
        # nn.Module's own __call__ costs more than the whole fast path; it is skipped only
        # when no hook, per module or global, would have run
        if self._frozen is not None:
            self._frozen.check()
        fast = self._fast
        if (fast is not None and not kwargs and not self.training and not self._forward_hooks
                and not (torch.is_grad_enabled() and self._anchor() is not None)
                and not self._forward_pre_hooks and not self._backward_hooks and not self._backward_pre_hooks
                and not _global_hooks()):
            out = fast(args)
            if out is not MISS:
                return out
        return super().__call__(*args, **kwargs)

    # ----------------------------------------------------------------- the call path

    def _flatten(self, args: tuple, kwargs: dict) -> list:
        if self._subclasses is not None:
            flat = self._subclasses.dense_inputs(args, self._keywords.arrange(args, kwargs) if kwargs else kwargs)
        elif not kwargs and len(args) == self._plain_arity:
            flat = args
        else:
            flat, spec = pytree.tree_flatten((args, kwargs))
            if spec != self._in_spec:
                kwargs = self._keywords.arrange(args, kwargs)  # keywords in another order, or a named error
                flat, spec = pytree.tree_flatten((args, kwargs))
                if spec != self._in_spec:
                    flat, spec = self._call_form.flatten((args, kwargs))
                    if not self._call_form.matches(spec):
                        self._structure_error(flat, args, kwargs)
                    flat = self._call_form.tensors(flat, self.device)  # constants checked, ints as tensors
        sizes: dict = {}
        for check, value in zip(self._checks, flat):
            check.check(value, self.device, sizes)
        return flat

    def _structure_error(self, flat, args, kwargs):
        names = [c.name for c in self._checks]
        detail = ""
        if self._call_form.active or self._plain_arity < 0:  # say where the structures differ
            detail = (f" As (args, kwargs), the bundle takes {describe_spec(self._in_spec, names)}; this call passes "
                      f"{describe_call((args, kwargs))}.")
        raise InputError(
            f"expected {len(names)} input(s) ({', '.join(names)}) in the exported structure; "
            f"got {len(flat)} in a different structure: {len(args)} positional, kwargs {sorted(kwargs)}.{detail}"
        )

    def _unflatten(self, outputs: list):
        if self._subclasses is not None:
            return self._subclasses.outer_outputs(outputs)
        if self._out_is_leaf:
            return outputs[0]
        if self._out_is_tuple:  # the common case, without pytree's walk
            return tuple(outputs)
        return self._unflatten_out(outputs, self._out_spec)

    def forward(self, *args, **kwargs):
        program = self._program_for_call()
        out = self._forward(program, args, kwargs)
        if self._fast is not None and program.kind == "inference":
            self._fast.accept_current_state()  # the full checks passed under it
        return out

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        if self._frozen is not None:
            raise FrozenWeightsError(refusal(self.bundle_path, "load_state_dict() was called"))
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    def run_graph(self, kind: str, *args, **kwargs):
        """Call one graph of the bundle by its kind, e.g. "decode" of a generation bundle."""
        if self._frozen is not None:
            self._frozen.check()
        program = self._programs.get(kind)
        if program is None:
            raise ModeError(f"this bundle has no '{kind}' graph; it has {', '.join(self._graph_kinds)}.")
        return self._forward(program, args, kwargs)

    def _forward(self, program: Program, args: tuple, kwargs: dict):
        if self._ambient.active:
            self._ambient.check()
        flat = self._flatten(args, kwargs)
        if torch.is_grad_enabled():
            if program.kind != "forward":
                check_inference_grad(flat, self.bundle_path, (c.name for c in self._checks))
            else:
                check_traced_without_grad(flat, program.gradless_inputs, self.bundle_path, self._checks)
        if program.static_shapes:
            program.check_static_shapes(flat)
        if program.guard.active:
            program.guard.check(flat)
        for i in program.set_requires_grad:  # forward calls requires_grad_() on these
            if flat[i].is_leaf:
                flat[i].requires_grad_(True)
        primals = program.primals(flat)
        if torch.is_autocast_enabled(self.device.type):
            # The graphs hold the dtypes captured at export; autocast must not re-cast them.
            with torch.autocast(self.device.type, enabled=False):
                return self._call(program, primals, flat)
        return self._call(program, primals, flat)

    def _call(self, program: Program, primals: list, flat):
        try:
            return self._call_graph(program, primals, flat)
        except AotcError:
            raise
        except Exception as e:
            raise GraphRunError(self._failure(program.kind, e, flat)) from e

    def _failure(self, kind: str, error: Exception, flat) -> str:
        """What failed, and the integer inputs, whose values the shape checks cannot see."""
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        ints = []
        for check, meta, value in zip(self._checks, self._user_meta, flat):
            if isinstance(value, torch.Tensor) and not value.is_floating_point() and value.numel():
                seen = f"{value.min().item()}..{value.max().item()}"
                at_export = f", {meta.value_range[0]}..{meta.value_range[1]} at export" if meta.value_range else ""
                ints.append(f"'{check.name}' (values {seen}{at_export})")
        hint = f" Check the values of {', '.join(ints)}." if ints else ""
        return f"the {kind} graph of '{self.bundle_path}' failed at run time: {type(error).__name__}: {first}.{hint}"

    def _call_graph(self, program: Program, primals: list, flat):
        grad = torch.is_grad_enabled()
        if program.kind == "forward" and grad and self._training_graphs and any(
            p.requires_grad for p, rg in zip(primals, program.requires_grad) if rg
        ):
            outs = self._run_autograd(program, primals)
        elif grad:
            with torch.no_grad():
                outs = program.graph(*primals)
            anchor = self._anchor() if program.inference else None
            if anchor is not None:
                results = with_refusing_history(
                    program.epilogue.apply(primals, list(outs), flat), program.with_history, anchor, self.bundle_path
                )
                return self._unflatten(results)
        else:
            outs = program.graph(*primals)
        epilogue = program.epilogue
        if epilogue.trivial and self._subclasses is None:
            if self._out_is_leaf:
                return outs[epilogue.outputs[0].output]
            return self._unflatten_out([outs[p.output] for p in epilogue.outputs], self._out_spec)
        return self._unflatten(epilogue.apply(primals, list(outs), flat))

    def _anchor(self) -> torch.Tensor | None:
        """A parameter that requires grad, if any: eager's outputs would then have history."""
        return next((p for p in self.parameters() if p.requires_grad), None)

    def _run_autograd(self, program: Program, primals: list) -> list:
        graphs = self._training_graphs
        # Inputs that can never get a gradient go in detached, so autograd ignores them.
        primals = [p.detach() if not rg and p.requires_grad else p for p, rg in zip(primals, program.requires_grad)]
        stash: list = []
        apply = GraphFunction.apply if tc.functorch_active() else _APPLY
        with_grad = apply(graphs, stash, *primals)
        outs = stash
        for position, value in zip(graphs.tangent_outputs, with_grad):
            outs[position] = value
        return outs

    def train_step(self, *args, **kwargs) -> torch.Tensor:
        """Run the joint graph once: accumulate .grad of every parameter (and of user inputs
        that require grad), update buffers, and return the loss. A bundle that carries its
        optimizer also updates the parameters and `self.optimizer`'s state, leaving the
        parameters' .grad alone, as `loss.backward(); opt.step(); opt.zero_grad()`."""
        return joint_step(self, args, kwargs)

    def _program_for_call(self) -> Program:
        if self.training:
            if "forward" in self._programs:
                return self._programs["forward"]
            if "inference" in self._programs and self._captured_training:
                return self._programs["inference"]
            if "joint" in self._programs:
                raise ModeError(
                    "This is a joint bundle: it runs whole training steps. Call "
                    "module.train_step(*inputs), which returns the loss and fills .grad."
                )
            raise ModeError(
                "This bundle holds an inference graph captured in eval mode; it cannot run in "
                "train mode (BatchNorm statistics, dropout). Call .eval(), or export with "
                "graphs=(\"forward\", \"backward\") (aotc export --autograd) for training."
            )
        if "inference" in self._programs and not self._captured_training:
            return self._programs["inference"]
        if "prefill" in self._programs:  # a generation bundle called like its model
            return self._programs["prefill"]
        raise ModeError(
            f"This bundle was captured in train mode ({', '.join(self._graph_kinds)}); it has no "
            "eval-mode graph. Call .train(), or export an inference graph (aotc export MODEL) "
            "for eval."
        )

    def extra_repr(self) -> str:
        return f"bundle={self.bundle_path!r}, backend={self.backend!r}, graphs={self._graph_kinds}"
