"""Dynamic ranges torch.export can keep: a declared range it cannot is narrowed to one it
proved, or refused with the line of code that fixed the size.

torch.export traces once and guards every size its trace relied on. Where a declared Dim
breaks such a guard (a loss that slices `[:, :-1]` and reshapes needs seq >= 3; a
sliding-window cache that keeps the last 3 tokens needs seq > 3; two Dims the code adds
are one; a `view(b, 4, 3)` fixes a size), it raises a constraint violation naming the Dim,
often with a suggested fix. aotc exports again within what torch proved:

- a narrower range (torch's suggestion, and the range where every guard on that dim
  holds around the example size) is adopted; a Dim tied to another (`b = a`,
  `seq = 2*_seq`) becomes that relation. Ranges only ever narrow: each new range lies
  within the declared one;
- a dim torch fixed to one size, or one for which no range holds, is refused with a
  DynamicShapeError naming the input, the dim, what torch derived, and the model's line.

The narrowings are returned for the bundle's metadata (`declared_min`/`declared_max`,
`narrowed_by`) and said in one line each (aotc.capture.range_guards words them, and the
refusals).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sympy
import torch
from torch.export import Dim, ExportedProgram

from aotc import _torch_compat as tc
from aotc._torch_compat import pytree
from aotc.capture.range_guards import (
    _VIOLATED,
    DeclaredDim,
    GuardSite,
    Narrowing,
    Range,
    _hi,
    _no_range,
    _on,
    _polynomial,
    _reason,
    _specialized,
)

# each retry is a whole trace; torch names every violated dim at once, so one or two do
MAX_ATTEMPTS = 4


def declared_dims(spec_args: tuple, inputs: tuple) -> dict[str, DeclaredDim]:
    """Every plain Dim (not a derived one, not a hint like Dim.AUTO) of `spec_args`,
    torch.export's dynamic_shapes for the positional `inputs`, by name."""
    found: dict[str, DeclaredDim] = {}
    leaves, _ = pytree.tree_flatten_with_path(inputs)
    for index, (path, value) in enumerate(leaves):
        dims = spec_at(spec_args, path, inputs)
        if not isinstance(value, torch.Tensor) or dims is None:
            continue
        items = dims.items() if isinstance(dims, dict) else enumerate(dims) if isinstance(dims, (list, tuple)) else ()
        for d, dim in items:
            if not _is_plain_dim(dim) or not 0 <= int(d) < value.dim():
                continue
            source = f"L['args']{pytree.keystr(path)}.size()[{int(d)}]"
            old = found.get(dim.__name__)
            found[dim.__name__] = DeclaredDim(
                name=dim.__name__, min=int(dim.min), max=_bound(dim.max),
                places=(*(old.places if old else ()), (index, int(d))),
                sources=(*(old.sources if old else ()), source),
                example=int(value.shape[int(d)]),
            )
    return found


def export_within_ranges(
    export: Callable[[Any], ExportedProgram], spec_args: tuple | None, inputs: tuple, names: list[str], model: str,
) -> tuple[ExportedProgram, list[Narrowing]]:
    """`export(spec)` with `spec = {"args": spec_args}`, again within narrower ranges
    while torch.export proves the declared ones do not hold (at most MAX_ATTEMPTS traces).
    `names` are the flat inputs' names, for messages; `model` the model's class name."""
    if spec_args is None:
        return export(None), []
    declared = declared_dims(spec_args, inputs)
    plan = _Plan(ranges={n: (d.min, d.max) for n, d in declared.items()})
    reasons: dict[str, str] = {}
    for _ in range(MAX_ATTEMPTS):
        with tc.shape_guards() as sites:
            try:
                ep = export({"args": plan.apply(spec_args)})
            except Exception as e:
                violation = tc.constraint_violation(e)
                if violation is None:
                    raise
            else:
                return ep, _narrowings(declared, plan, reasons)
        new_plan = _refine(plan, violation, declared, sites, names, model)
        if new_plan == plan:
            raise _no_range(violation, declared, sites, names, model)
        for name in declared:
            if new_plan.describe(name) != plan.describe(name):
                reasons[name] = _reason(declared[name], declared, sites, new_plan, violation, names)
        plan = new_plan
    raise _no_range(violation, declared, sites, names, model)


@dataclass(frozen=True)
class _Plan:
    """The dims to export with: a range per declared Dim and per root torch introduced
    (`_seq`), and the declared Dims torch tied to a root as `a*root + c`."""

    ranges: dict[str, Range]
    relations: dict[str, tuple[str, int, int]] = dataclasses.field(default_factory=dict)

    def dim(self, name: str, cache: dict[str, Any]) -> Any:
        if name not in cache:
            if name in self.relations:
                root, a, c = self.relations[name]
                cache[name] = a * self.dim(root, cache) + c if (a, c) != (1, 0) else self.dim(root, cache)
            else:
                lo, hi = self.ranges[name]
                cache[name] = Dim(name, min=lo) if hi is None else Dim(name, min=lo, max=hi)
        return cache[name]

    def apply(self, spec_args: tuple) -> tuple:
        """`spec_args` with each plain Dim replaced by this plan's; everything else kept."""
        cache: dict[str, Any] = {}

        def replace(node):
            if _is_plain_dim(node):
                known = node.__name__ in self.ranges or node.__name__ in self.relations
                return self.dim(node.__name__, cache) if known else node  # torch.export says why it fits nowhere
            if isinstance(node, dict):
                return {k: replace(v) for k, v in node.items()}
            if isinstance(node, (list, tuple)):
                return type(node)(replace(v) for v in node)
            return node

        return replace(spec_args)

    def range_of(self, name: str) -> Range:
        """The sizes this plan exports a declared Dim for."""
        if name not in self.relations:
            return self.ranges[name]
        root, a, c = self.relations[name]
        lo, hi = self.ranges[root]
        return a * lo + c, None if hi is None else a * hi + c

    def describe(self, name: str) -> str:
        lo, hi = self.range_of(name)
        relation = f" = {_affine(*self.relations[name])}" if name in self.relations else ""
        return f"{lo}..{_hi(hi)}{relation}"


_FIX = re.compile(r"^\s+(\w+) = (.+?)\s*$")
_DIM_FIX = re.compile(r"Dim\('(\w+)'(?:, min=(\d+))?(?:, max=(\d+))?\)$")


def suggested_fixes(violation: str) -> dict[str, str]:
    """torch's "Suggested fixes:" block, `name = fix` per line, as {name: fix}."""
    _, found, block = violation.partition("Suggested fixes:")
    fixes: dict[str, str] = {}
    for line in block.splitlines()[1:] if found else ():
        match = _FIX.match(line)
        if not match:
            if fixes or line.strip():
                break
            continue
        fixes[match[1]] = match[2]
    return fixes


def _refine(plan: _Plan, violation: str, declared: dict[str, DeclaredDim], sites: list[GuardSite],
            names: list[str], model: str) -> _Plan:
    """The next plan: `plan` narrowed by torch's fixes and by the guards it traced."""
    ranges, relations = dict(plan.ranges), dict(plan.relations)
    fixes = suggested_fixes(violation)
    for name, fix in fixes.items():
        if re.fullmatch(r"-?\d+", fix):
            if name in declared:
                raise _specialized(declared[name], declared, int(fix), sites, names, model)
            continue
        if match := _DIM_FIX.fullmatch(fix):
            lo, hi = int(match[2]) if match[2] else None, int(match[3]) if match[3] else None
            old = ranges.get(name, (0, None))
            ranges[name] = _intersect(old, (lo if lo is not None else old[0], hi))
        elif name in declared and (relation := _parse_relation(fix)) is not None:
            relations[name] = relation
    violated = set(_VIOLATED.search(violation)[1].replace(" ", "").split(",")) if _VIOLATED.search(violation) else set()
    for name in violated & (set(declared) - set(relations)):
        ranges[name] = _intersect(ranges[name], _guarded_range(declared[name], ranges[name], sites))
    # a relation holds the dim within what was declared for it: clamp its root
    for name, (root, a, c) in relations.items():
        lo, hi = ranges[name] if name in ranges else (declared[name].min, declared[name].max)
        root_lo = math.ceil((lo - c) / a)
        root_hi = None if hi is None else math.floor((hi - c) / a)
        ranges[root] = _intersect(ranges.get(root, (0, None)), (max(root_lo, 0), root_hi))
    refined = _Plan(ranges=ranges, relations=relations)
    for name, d in declared.items():
        lo, hi = refined.range_of(name)
        if (hi is not None and lo > hi) or not lo <= d.example <= (hi if hi is not None else d.example):
            raise _no_range(violation, declared, sites, names, model)
    return refined


def _parse_relation(fix: str) -> tuple[str, int, int] | None:
    """`2*_seq + 1` -> ("_seq", 2, 1); `seq` -> ("seq", 1, 0); None for anything else."""

    try:
        expr = sympy.sympify(fix)
    except (sympy.SympifyError, TypeError, SyntaxError):
        return None
    if len(expr.free_symbols) != 1:
        return None
    root = next(iter(expr.free_symbols))
    poly = sympy.Poly(expr, root)
    if poly.degree() != 1 or not all(c.is_integer for c in poly.all_coeffs()):
        return None
    a, c = (int(x) for x in poly.all_coeffs())
    return (str(root), a, c) if a >= 1 else None


def _guarded_range(dim: DeclaredDim, current: Range, sites: list[GuardSite]) -> Range:
    """The sizes around the example within `current` where every traced guard on `dim`
    alone holds (guards sympy cannot solve are left to torch's own fixes)."""
    lo, hi = current
    for expr, symbols, _ in sites:
        if len(symbols) != 1 or not _on(dim, symbols):
            continue
        solved = _solve(expr, dim.example, (lo, hi))
        if solved is not None:
            lo, hi = _intersect((lo, hi), solved)
    return lo, hi


def _solve(expr, example: int, within: Range) -> Range | None:
    """The integers around `example` within `within` where `expr`, a condition on one
    symbol, holds; None when sympy cannot say."""

    if not _polynomial(expr):
        return None
    (symbol,) = expr.free_symbols
    x = sympy.Symbol("x", real=True)
    lo, hi = within
    try:
        solution = sympy.solveset(expr.subs(symbol, x), x, sympy.Interval(lo, sympy.oo if hi is None else hi))
    except Exception:  # torch's own sympy functions (FloorDiv, Mod) and the like
        return None
    for part in solution.args if isinstance(solution, sympy.Union) else (solution,):
        if isinstance(part, sympy.FiniteSet) and example in part:
            return example, example
        if isinstance(part, sympy.Interval) and part.contains(example):
            start = math.ceil(part.start) + (1 if part.left_open and part.start.is_integer else 0)
            end = None if part.end == sympy.oo else math.floor(part.end) - (1 if part.right_open and part.end.is_integer else 0)
            return start, end
        if not isinstance(part, (sympy.FiniteSet, sympy.Interval)):
            return None
    return None


def _narrowings(declared: dict[str, DeclaredDim], plan: _Plan, reasons: dict[str, str]) -> list[Narrowing]:
    out = []
    for name, d in declared.items():
        lo, hi = plan.range_of(name)
        relation = _affine(*plan.relations[name]) if name in plan.relations else None
        if relation is None and (lo, hi) == (d.min, d.max):
            continue
        out.append(Narrowing(name=name, places=d.places, declared_min=d.min, declared_max=d.max, min=lo, max=hi,
                             relation=relation, reason=reasons.get(name, "torch.export's guards")))
    return out


def _intersect(a: Range, b: Range) -> Range:
    lo = max(a[0], b[0])
    his = [h for h in (a[1], b[1]) if h is not None]
    return lo, min(his) if his else None


def _affine(root: str, a: int, c: int) -> str:
    return (f"{a}*{root}" if a != 1 else root) + (f" + {c}" if c > 0 else f" - {-c}" if c < 0 else "")


def _bound(value: Any) -> int | None:
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return int(number) if math.isfinite(number) else None


def _is_plain_dim(node: Any) -> bool:
    return isinstance(node, Dim) and not hasattr(node, "root")


def spec_at(spec: Any, path: tuple, value: Any = None) -> Any:
    """The dynamic_shapes entry at `path` of the inputs `value` (None where there is none).
    A node of the user's own type (a registered dataclass) takes a list of its children's
    entries, as torch.export matches them; `value` says which child a key is."""
    for key in path:
        if spec is None:
            return None
        node = pytree.SUPPORTED_NODES.get(type(value)) if value is not None else None
        if isinstance(key, pytree.SequenceKey) and isinstance(spec, (list, tuple)) and key.idx < len(spec):
            spec = spec[key.idx]
        elif isinstance(key, pytree.MappingKey) and isinstance(spec, dict):
            spec = spec.get(key.key)
        elif node is not None and node.flatten_with_keys_fn is not None and isinstance(spec, (list, tuple)):
            keys = [k for k, _ in node.flatten_with_keys_fn(value)[0]]
            if key not in keys or keys.index(key) >= len(spec):
                return None
            spec = spec[keys.index(key)]
        else:
            return None
        try:
            value = key.get(value) if value is not None else None
        except (TypeError, KeyError, IndexError, AttributeError):  # a node that keys its children otherwise
            value = None
    return spec
