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
`narrowed_by`) and said in one line each.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.export import Dim, ExportedProgram

from aotc import _torch_compat as tc
from aotc._torch_compat import pytree
from aotc.errors import DynamicShapeError

# each retry is a whole trace; torch names every violated dim at once, so one or two do
MAX_ATTEMPTS = 4

Place = tuple[int, int]  # (flat user input index, dim)
Range = tuple[int, "int | None"]  # [min, max]; max None: unbounded
GuardSite = tuple[Any, dict[str, tuple[list[str], "int | None"]], "tuple[str, int] | None"]  # see tc.shape_guards


@dataclass(frozen=True)
class DeclaredDim:
    """A plain Dim of the user's dynamic_shapes: its declared range, where it is used
    (`places`, parallel to torch's `sources` such as "L['args'][0].size()[1]"), and the
    example's size there."""

    name: str
    min: int
    max: int | None
    places: tuple[Place, ...]
    sources: tuple[str, ...]
    example: int


@dataclass(frozen=True)
class Narrowing:
    """A declared Dim exported over less than was declared. [min, max] lies within
    [declared_min, declared_max]; `relation` is set where torch tied the dim to another
    ("seq", "2*_seq"); `reason` says which guard of torch's, added by which line, the
    declared range broke."""

    name: str
    places: tuple[Place, ...]
    declared_min: int
    declared_max: int | None
    min: int
    max: int | None
    relation: str | None
    reason: str


def declared_dims(spec_args: tuple, inputs: tuple) -> dict[str, DeclaredDim]:
    """Every plain Dim (not a derived one, not a hint like Dim.AUTO) of `spec_args`,
    torch.export's dynamic_shapes for the positional `inputs`, by name."""
    found: dict[str, DeclaredDim] = {}
    leaves, _ = pytree.tree_flatten_with_path(inputs)
    for index, (path, value) in enumerate(leaves):
        dims = _spec_at(spec_args, path)
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
                return self.dim(node.__name__, cache)
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
_VIOLATED = re.compile(r"Constraints violated \(([^)]*)\)")


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
    import sympy

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
    import sympy

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


def describe(n: Narrowing, names: list[str]) -> str:
    """One line: which dim, declared what, exported as what, because of which guard."""
    where = ", ".join(f"input '{names[i]}' dim {d}" for i, d in n.places)
    exported = f"{n.min}..{_hi(n.max)}" + (f" (= {n.relation})" if n.relation else "")
    return (f"{where} (Dim '{n.name}'): declared {n.declared_min}..{_hi(n.declared_max)}, exported for {exported}: "
            f"torch.export proved the graph only there ({n.reason})")


def _reason(dim: DeclaredDim, declared: dict[str, DeclaredDim], sites: list[GuardSite], plan: _Plan, violation: str,
            names: list[str]) -> str:
    """The first traced guard on `dim` that fails at a declared size the plan drops, with
    its line; else torch's own words."""
    lo, hi = plan.range_of(dim.name)
    candidates = (lo - 1, dim.min, dim.example - 1, dim.example + 1, dim.max, None if hi is None else hi + 1)
    dropped = [
        v for v in candidates
        if v is not None and dim.min <= v and (dim.max is None or v <= dim.max)
        and (v < lo or (hi is not None and v > hi) or dim.name in plan.relations)
    ]
    site = _failing_site(dim, sites, dropped, declared)
    if site is not None:
        return site
    line = next((ln.strip(" -") for ln in violation.splitlines() if ln.strip().startswith("- ") and dim.name in ln), "")
    return _plain_sources(line, _readable_sources([dim], names)) or "torch.export's guards"


def _failing_site(dim: DeclaredDim, sites: list[GuardSite], values: list[int],
                  declared: dict[str, DeclaredDim]) -> str | None:
    """"guard at file:line" for the first site whose guard holds at the example and fails
    at one of `values`; None when none does."""
    for expr, symbols, where in sites:
        if not _on(dim, symbols):
            continue
        for v in values:
            if _holds(expr, symbols, dim, dim.example) is True and _holds(expr, symbols, dim, v) is False:
                return _readable(expr, symbols, declared) + (f" at {_where(where)}" if where else "")
    return None


def _holds(expr, symbols: dict, dim: DeclaredDim, value: int) -> bool | None:
    """`expr` with `dim` at `value` and every other symbol at its example value."""
    import sympy

    subs = {}
    for s in expr.free_symbols:
        sources, hint = symbols.get(str(s), ([], None))
        if set(sources) & set(dim.sources):
            subs[s] = value
        elif hint is not None:
            subs[s] = hint
        else:
            return None
    try:
        result = expr.xreplace({k: sympy.Integer(v) for k, v in subs.items()})
    except Exception:
        return None
    return bool(result) if result in (sympy.true, sympy.false) else None


def _readable(expr, symbols: dict, declared: dict[str, DeclaredDim]) -> str:
    """A guard in the user's Dim names: `seq >= 3`, `seq != 2`, `feat == 12`, `Eq(a, b)`."""
    import sympy

    renames = {}
    for s in expr.free_symbols:
        sources = set(symbols.get(str(s), ([], None))[0])
        name = next((d.name for d in declared.values() if sources & set(d.sources)), None)
        if name is not None:
            renames[s] = sympy.Symbol(name)
    expr = expr.xreplace(renames)
    if len(expr.free_symbols) == 1 and _polynomial(expr):
        (x,) = expr.free_symbols
        try:
            solution = sympy.solveset(expr, x, sympy.S.Reals)
        except Exception:
            solution = None
        if isinstance(solution, sympy.FiniteSet) and len(solution) == 1:
            return f"{x} == {next(iter(solution))}"
        if isinstance(solution, sympy.Interval):
            lo, hi = solution.start, solution.end
            if hi == sympy.oo and lo.is_finite:
                return f"{x} {'>' if solution.left_open else '>='} {lo}"
            if lo == -sympy.oo and hi.is_finite:
                return f"{x} {'<' if solution.right_open else '<='} {hi}"
        if isinstance(solution, sympy.Complement) and solution.args[0] == sympy.S.Reals:
            return f"{x} != {', '.join(map(str, solution.args[1]))}"
        if isinstance(solution, sympy.Union) and len(solution.args) == 2:
            a, b = solution.args
            if (isinstance(a, sympy.Interval) and isinstance(b, sympy.Interval) and a.start == -sympy.oo
                    and b.end == sympy.oo and a.end == b.start and a.right_open and b.left_open):
                return f"{x} != {a.end}"
    return str(expr)


def _polynomial(expr) -> bool:
    """Whether `expr` is a (in)equality of polynomials, which sympy solves quickly; torch's
    own functions (FloorDiv, Mod, ...) it may not, or only slowly."""
    import sympy

    return not expr.atoms(sympy.Function, sympy.Pow) - expr.atoms(sympy.Symbol)


def _on(dim: DeclaredDim, symbols: dict) -> bool:
    return any(set(sources) & set(dim.sources) for sources, _ in symbols.values())


def _where(where: tuple[str, int]) -> str:
    path, line = where
    try:
        rel = os.path.relpath(path)
    except ValueError:
        rel = path
    return f"{path if rel.startswith('..') else rel}:{line}"


def _specialized(dim: DeclaredDim, declared: dict[str, DeclaredDim], size: int, sites: list[GuardSite], names: list[str], model: str) -> DynamicShapeError:
    site = _failing_site(dim, sites, [v for v in (size - 1, size + 1, dim.min) if v >= 0 and v != size], declared)
    where = ", ".join(f"input '{names[i]}' dim {d}" for i, d in dim.places)
    cause = f"the guard {site}" if site else "a guard whose line torch did not keep"
    return DynamicShapeError(
        f"{where} is declared dynamic (Dim '{dim.name}', {dim.min}..{_hi(dim.max)}), but torch.export proved "
        f"{model} only works when it is {size}: {cause} fixes it. No range of sizes holds for one graph. "
        f"Keep that dim static: {_static_hint(dim, names)}; or change the code so the size is not fixed."
    )


def _no_range(violation: str, declared: dict[str, DeclaredDim], sites: list[GuardSite], names: list[str],
              model: str) -> DynamicShapeError:
    lines = [ln.strip(" -") for ln in violation.splitlines() if ln.strip().startswith("- ")]
    sources = _readable_sources(declared.values(), names)
    violated = _VIOLATED.search(violation)
    dims = [declared[n] for n in (violated[1].replace(" ", "").split(",") if violated else []) if n in declared]
    sites_text = "; ".join(s for d in dims if (s := _failing_site(d, sites, [d.min, d.example - 1, d.example + 1], declared)))
    return DynamicShapeError(
        f"torch.export cannot keep the dynamic dims declared for {model}, and no narrower range of sizes "
        f"around the example's holds: {'; '.join(_plain_sources(ln, sources) for ln in lines[:3])}"
        + (f" ({sites_text})" if sites_text else "")
        + f". Keep those dims static ({'; '.join(_static_hint(d, names) for d in dims) or _static_hint(None, names)}), "
        "or declare the ranges torch suggests."
    )


def _static_hint(dim: DeclaredDim | None, names: list[str]) -> str:
    """How to keep `dim` static, in aotc.export and in `aotc export`."""
    if dim is None:
        return "drop them from dynamic_shapes= (aotc.export), or pass --static NAME:DIM to aotc export"
    flags = " ".join(f"--static {names[i]}:{d}" for i, d in dim.places)
    return f"drop Dim '{dim.name}' from dynamic_shapes= (aotc.export), or pass {flags} to aotc export"


def _readable_sources(dims, names: list[str]) -> dict[str, str]:
    return {s: f"input '{names[i]}' dim {d}" for dim in dims for s, (i, d) in zip(dim.sources, dim.places)}


def _plain_sources(text: str, sources: dict[str, str]) -> str:
    """torch's `L['args'][0].size()[1]` as "input 'ids' dim 1" where known."""
    for source, readable in sources.items():
        text = text.replace(source, readable)
    return text


def _intersect(a: Range, b: Range) -> Range:
    lo = max(a[0], b[0])
    his = [h for h in (a[1], b[1]) if h is not None]
    return lo, min(his) if his else None


def _affine(root: str, a: int, c: int) -> str:
    return (f"{a}*{root}" if a != 1 else root) + (f" + {c}" if c > 0 else f" - {-c}" if c < 0 else "")


def _hi(value: int | None) -> str:
    return "inf" if value is None else str(value)


def _bound(value: Any) -> int | None:
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return int(number) if math.isfinite(number) else None


def _is_plain_dim(node: Any) -> bool:
    return isinstance(node, Dim) and not hasattr(node, "root")


def _spec_at(spec: Any, path: tuple) -> Any:
    for key in path:
        if spec is None:
            return None
        if isinstance(key, pytree.SequenceKey) and isinstance(spec, (list, tuple)) and key.idx < len(spec):
            spec = spec[key.idx]
        elif isinstance(key, pytree.MappingKey) and isinstance(spec, dict):
            spec = spec.get(key.key)
        else:
            return None
    return spec
