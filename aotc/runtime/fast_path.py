"""The call path of a compiled inference program, in a few C calls.

Per call, a compiled graph needs only what makes its code valid for the inputs: each
input a plain tensor with the dtype, device, sizes (dynamic ones within range), layout
and `requires_grad` of export; inputs it mutates not overlapping the others; and a
global state the full check accepted before. `FastPath` checks exactly that (Dynamo's
own C++ guards: `TensorGuards` per input, `GlobalStateGuard` for grad mode, autocast,
default dtype, deterministic algorithms and threads), calls the package's runner and
hands the outputs to `finish` (the epilogue, or picking the user outputs). Anything
else returns `MISS`, and the caller takes the full wrapper stack, which raises the named
error or handles the call.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import torch

from aotc import _torch_compat as tc

MISS = object()
_MAX_STATES = 4  # global states accepted by the full check, remembered per program


class FastPath:
    def __init__(self, run: Callable[[list], list], examples: list[torch.Tensor], layouts: list, dynamic: list,
                 state: list[tuple[dict, str]], mutated: list[int], finish: Callable[[list, list, tuple], object],
                 keeps_primals: bool = True):
        """`run`: the runner over (state..., user inputs...) with no autograd and no
        layout fitting; `examples`: one tensor per user input, shaped and laid out as the
        compiled code expects (dynamic dims at their example size); `layouts`: the
        StrideGuard of each input; `dynamic`: (input, dim, symbol, min, max) per dynamic
        dim; `state`: (table, name) per parameter or buffer in graph order; `mutated`: the
        user inputs the graph mutates; `finish(primals, outs, args)` gives the result
        (primals is None when `keeps_primals` is false: finish does not read them)."""
        self._run = run
        self._arity = len(examples)
        self._guard = tc.tensor_guards(examples, *_guard_dims(examples, layouts, dynamic))
        self._contiguous = [i for i, (t, g) in enumerate(zip(examples, layouts)) if _strides_vary(t, g, dynamic, i)]
        self._dynamic = [(i, d, lo, hi) for i, d, _, lo, hi in dynamic]
        first: dict[str, tuple[int, int]] = {}
        self._equal = []  # dims that share a symbol with an earlier one
        for i, d, symbol, _, _ in dynamic:
            if symbol in first:
                self._equal.append((i, d, *first[symbol]))
            else:
                first[symbol] = (i, d)
        self._gather = _gatherer(state)
        self._mutated = [(m, [k for k in range(len(examples)) if k != m]) for m in mutated]
        self._finish = finish
        self._keeps_primals = keeps_primals
        self._states: list = []

    def accept_current_state(self) -> None:
        """Remember the global state now: the full check just accepted a call under it."""
        if (len(self._states) < _MAX_STATES and not _autocast() and not tc.torch_function_mode_count()
                and not any(state.check() for state in self._states)):
            self._states.append(tc.global_state_guard())

    def __call__(self, args: tuple):
        if len(args) != self._arity:
            return MISS
        for a in args:
            if type(a) is not torch.Tensor:  # the C++ guard takes tensors only
                return MISS
        for state in self._states:
            if state.check():
                break
        else:
            return MISS
        if tc.torch_function_mode_count() or not self._guard.check(*args):
            return MISS
        for i, d, lo, hi in self._dynamic:
            size = args[i].shape[d]
            if size < lo or (hi is not None and size > hi):
                return MISS
        for i, d, j, e in self._equal:
            if args[i].shape[d] != args[j].shape[e]:
                return MISS
        for i in self._contiguous:
            if not args[i].is_contiguous():
                return MISS
        for m, others in self._mutated:  # contiguous here: memory is [data_ptr, + nbytes)
            start = args[m].data_ptr()
            end = start + args[m].nbytes
            for k in others:
                other = args[k].data_ptr()
                if other < end and start < other + args[k].nbytes:
                    return MISS
        primals = [*self._gather(), *args]
        if self._keeps_primals:  # the runner empties the list it is given
            return self._finish(primals, self._run(list(primals)), args)
        return self._finish(None, self._run(primals), args)


def _autocast() -> bool:
    return torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda")


def _strides_vary(example: torch.Tensor, layout, dynamic: list, i: int) -> bool:
    """Whether input i's strides depend on a dynamic size (then it must be contiguous)."""
    return layout.stride is None and any(j == i for j, *_ in dynamic)


def layouts_checkable(layouts: list) -> bool:
    """Whether the guards can vouch for every input's compiled layout: known, and static
    strides or the row-major order (which is_contiguous checks)."""
    return all(g is not None and (g.stride is not None or g.order == tuple(range(len(g.order)))) for g in layouts)


def _guard_dims(examples, layouts, dynamic) -> tuple[list, list]:
    """Per input, the sizes and strides the guard compares (None: not compared)."""
    sizes, strides = [], []
    for i, t in enumerate(examples):
        dims = {d for j, d, *_ in dynamic if j == i}
        sizes.append([None if d in dims else s for d, s in enumerate(t.shape)])
        strides.append([None] * t.dim() if dims else list(t.stride()))
    return sizes, strides


def _gatherer(state: list[tuple[dict, str]]) -> Callable[[], list | tuple]:
    """A function returning the current parameter and buffer tensors in graph order: one
    C-level item lookup per table, since a parameter may be replaced between calls."""
    tables: list = []
    for table, name in state:
        if tables and tables[-1][0] is table:
            tables[-1][1].append(name)
        else:
            tables.append((table, [name]))
    getters = [(table, operator.itemgetter(*names), len(names) == 1) for table, names in tables]
    if len(getters) == 1 and not getters[0][2]:  # the common case: every tensor in one table
        table, get, _ = getters[0]
        return lambda: get(table)

    def gather() -> list:
        out: list = []
        for table, get, single in getters:
            if single:
                out.append(get(table))
            else:
                out.extend(get(table))
        return out

    return gather
