"""The facts of dynamic-range narrowing and how they are told: the Dims the user
declared, the narrowings export adopts, and the guards torch traced, worded in the
user's Dim names with the model's line (`seq >= 3 at model.py:12`), for the one-line
notes and the DynamicShapeErrors of aotc.capture.ranges.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sympy

from aotc.errors import DynamicShapeError

if TYPE_CHECKING:
    from aotc.capture.ranges import _Plan

Place = tuple[int, int]  # (flat user input index, dim)
Range = tuple[int, "int | None"]  # [min, max]; max None: unbounded
GuardSite = tuple[Any, dict[str, tuple[list[str], "int | None"]], "tuple[str, int] | None"]  # see tc.shape_guards
_VIOLATED = re.compile(r"Constraints violated \(([^)]*)\)")


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


def _hi(value: int | None) -> str:
    return "inf" if value is None else str(value)
