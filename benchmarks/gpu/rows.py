"""Running one row: build every variant, check it against eager, then time the ones that
passed together, interleaved.

An inference row: eager's output on the row's inputs is the reference; each variant is
built, called once (its first call: torch.compile's compile), warmed up, called once more
and that output judged; then every variant that matched is timed round-robin. A training
row: each variant takes `check_steps` steps from the same weights; its parameter updates
must match eager's (fused torch.optim); then the steps are timed the same way.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from benchmarks.gpu import measure, models, plan, variants
from benchmarks.gpu.plan import NOT_RUN_BUDGET, Budget, RowCosts, RowSpec
from benchmarks.gpu.variants import INFERENCE, TRAINING


@dataclass(frozen=True)
class RunOptions:
    """How rows run: the device, the variants, the timing (rounds of calls sized to about
    `round_s` for the slowest variant, after `warmup` calls), the training check's step
    count, where bundles go, and the cost guesses the budget starts from."""

    device: torch.device
    workdir: Path
    variants: tuple[str, ...] = INFERENCE
    train_variants: tuple[str, ...] = TRAINING
    rounds: int = 7
    warmup: int = 5
    round_s: float = 0.1
    check_steps: int = 3
    max_batch: int = models.MAX_BATCH
    row_prior_s: float = 90.0  # a row's cost before one has finished (compiles dominate)
    autotune_prior_s: float = 120.0


@dataclass
class VariantResult:
    """One variant in one row. status: "ok" (checked and timed), "WRONG" (outputs differ
    from eager's: not timed), "failed" (raised: `reason` has the error) or "not run"
    (`reason` says why). `first_call_s`: the first call's seconds (torch.compile's
    compile is in it); `setup_s`: loading before it (aotc.load)."""

    name: str
    status: str = "ok"
    reason: str = ""
    setup_s: float | None = None
    first_call_s: float | None = None
    check: dict | None = None
    median_ms: float | None = None
    low_ms: float | None = None
    high_ms: float | None = None
    samples_ms: list[float] = field(default_factory=list)
    calls_per_round: int | None = None

    def describe(self) -> str:
        if self.status == "not run":
            return self.reason
        return f"{self.status}: {self.reason}" if self.reason else self.status


@dataclass
class RowResult:
    """One row's results. status: "ok", "WRONG" (some variant's outputs differ: named in
    its VariantResult), "failed" (eager itself did not run: nothing to check against) or
    "not run". `fastest`/`runner_up`/`tie` rank the timed variants by median; a tie when
    their round-to-round ranges overlap."""

    kind: str
    model: str
    dtype: str
    batch: int
    optimizer: str | None = None
    status: str = "ok"
    reason: str = ""
    seconds: float = 0.0
    bundle: dict | None = None
    variants: dict[str, VariantResult] = field(default_factory=dict)
    fastest: str | None = None
    runner_up: str | None = None
    tie: bool = False
    note: str = ""

    @staticmethod
    def of(row: RowSpec) -> "RowResult":
        return RowResult(row.kind, row.model, row.dtype, row.batch, row.optimizer)

    def as_json(self) -> dict:
        return dataclasses.asdict(self)


def not_run(row: RowSpec, names: tuple[str, ...], reason: str) -> RowResult:
    result = RowResult.of(row)
    result.status, result.reason = "not run", reason
    result.variants = {n: VariantResult(n, "not run", reason) for n in names}
    return result


def _error(e: BaseException) -> str:
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first[:300]}"


class Bundles:
    """The bundles built so far, so later rows reuse them: an inference bundle per (model,
    dtype) when its batch is dynamic, else per (model, dtype, batch); a joint bundle per
    (model, optimizer, batch). A failed build is remembered too, as its error."""

    def __init__(self, options: RunOptions):
        self.o = options
        self.built: dict[tuple, models.BuiltBundle | str] = {}
        self.reported: set[tuple] = set()

    def inference(self, row: RowSpec) -> tuple[models.BuiltBundle | None, dict]:
        """The row's bundle (None when it could not be built) and what the row reports of it."""
        dtype = models.DTYPES[row.dtype]
        dynamic = self._get((row.model, row.dtype), lambda: models.export_inference(
            row.source, dtype, self.o.workdir / f"{row.model}-{row.dtype}", self.o.device, None, self.o.max_batch))
        if isinstance(dynamic[0], models.BuiltBundle):
            return dynamic
        static = self._get((row.model, row.dtype, row.batch), lambda: models.export_inference(
            row.source, dtype, self.o.workdir / f"{row.model}-{row.dtype}-b{row.batch}", self.o.device, row.batch))
        return static[0], {**static[1], "dynamic_batch_error": dynamic[1]["error"]}

    def training(self, row: RowSpec) -> tuple[models.BuiltBundle | None, dict]:
        return self._get((row.model, row.optimizer, row.batch), lambda: models.export_training(
            row.source, row.optimizer, row.batch,
            self.o.workdir / f"{row.model}-train-{row.optimizer}-b{row.batch}", self.o.device))

    def _get(self, key: tuple, make: Callable[[], models.BuiltBundle]) -> tuple[models.BuiltBundle | None, dict]:
        if key not in self.built:
            try:
                self.built[key] = make()
            except Exception as e:  # a model aotc cannot export or compile: its rows say so
                self.built[key] = _error(e)
        found = self.built[key]
        if not isinstance(found, models.BuiltBundle):
            return None, {"error": found}
        # its export and compile seconds belong to the first row that used it
        first = key not in self.reported
        self.reported.add(key)
        return found, {**found.as_json(), "built_in_this_row": first}


def run_row(row: RowSpec, o: RunOptions, bundles: Bundles, budget: Budget, costs: RowCosts, rows_left: int,
            say: Callable[[str], None]) -> RowResult:
    """One row, whatever happens in it: an error outside any variant (a model file that
    does not import, a device that fails) is the row failing, and the next row runs."""
    started = time.perf_counter()
    try:
        if row.kind == "inference":
            result = run_inference(row, o, bundles, budget, costs, rows_left, say)
        else:
            result = run_training(row, o, bundles, budget, say)
    except Exception as e:
        result = RowResult.of(row)
        result.status, result.reason = "failed", _error(e)
    finally:
        release(o.device)
    result.seconds = time.perf_counter() - started
    return result


def release(device: torch.device) -> None:
    """Free what a row held: compiled callables, CUDA graph pools, cached blocks; and
    torch.compile's caches, so the next row's models compile afresh rather than hitting
    the recompile limit on a forward every row shares."""
    torch.compiler.reset()
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ----------------------------------------------------------------- inference


def run_inference(row: RowSpec, o: RunOptions, bundles: Bundles, budget: Budget, costs: RowCosts,
                  rows_left: int, say: Callable[[str], None]) -> RowResult:
    result = RowResult.of(row)
    dtype = models.DTYPES[row.dtype]
    spec = models.load(row.source)
    model = models.fresh_module(row.source).to(dtype).eval()
    inputs = models.cast(models.at_batch((spec.args, spec.kwargs), row.batch), dtype)
    bundle = None
    if any(n in variants.NEEDS_BUNDLE for n in o.variants) and not budget.over():
        say(f"  {row.label}: aotc export + compile (or reuse)")
        built, result.bundle = bundles.inference(row)
        bundle = built.path if built else None
    model = model.to(o.device)
    args, kwargs = models.to_device(inputs, o.device)
    shared = variants.RowInputs(model, args, kwargs, o.device, bundle)
    ready: dict[str, variants.Variant] = {}
    estimates: dict[str, float] = {}
    with torch.no_grad():  # every variant is served as inference
        try:
            expected = measure.snapshot(model(*args, **kwargs))
        except Exception as e:
            result.status, result.reason = "failed", f"eager failed: {_error(e)}"
            return result
        truth = float64_truth(model, args, kwargs)
        for name in o.variants:
            vr = result.variants[name] = VariantResult(name)
            if budget.over():
                vr.status, vr.reason = "not run", NOT_RUN_BUDGET
                continue
            if name == "compile-max-autotune":
                fits, why = plan.autotune_fits(budget, costs, rows_left, o.autotune_prior_s)
                if not fits:
                    vr.status, vr.reason = "not run", why
                    continue
            started = time.perf_counter()
            variant = _prepare(name, shared, vr, expected, truth, o)
            say(f"  {row.label}: {name}: {vr.describe()} ({time.perf_counter() - started:.1f} s)")
            if variant is not None:
                ready[name], estimates[name] = variant
        _time(result, {n: v.call for n, v in ready.items()}, estimates, o)
    _judge_row(result)
    return result


def float64_truth(model: torch.nn.Module, args: tuple, kwargs: dict) -> list[torch.Tensor] | None:
    """Eager's output in float64 from the same weights and inputs, upcast exactly: what
    an output outside eager's tolerance is judged against. None for a model that does not
    run in float64."""
    from aotc._torch_compat import pytree

    def wide(t):
        return t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t

    try:
        return measure.snapshot(copy.deepcopy(model).double()(*pytree.tree_map(wide, args),
                                                              **pytree.tree_map(wide, kwargs)))
    except Exception:  # float32-only code (a dtype check, a kernel without a double version)
        return None


def _prepare(name: str, shared: variants.RowInputs, vr: VariantResult, expected, truth, o: RunOptions):
    """Build, first call, warm up and check one variant; (variant, seconds per call) when
    it matched eager (within tolerance, or no further from `truth` than eager itself,
    measure.judge_against_truth), else None with `vr` saying why."""
    try:
        variant = variants.build(name, shared)
        vr.setup_s = variant.setup_s
        start = time.perf_counter()
        variant.call()
        measure.sync(o.device)
        vr.first_call_s = time.perf_counter() - start
        per_call = measure.seconds_per_call(variant.call, o.warmup, o.device)
        got = variant.leaves(variant.call())
        check = measure.judge(expected, got)
        if not check.passed and truth is not None:
            check = measure.judge_against_truth(expected, got, truth)
    except variants.NotRun as e:
        vr.status, vr.reason = "not run", f"not run: {e}"
        return None
    except Exception as e:
        vr.status, vr.reason = "failed", _error(e)
        return None
    vr.check = dataclasses.asdict(check)
    if not check.passed:
        vr.status, vr.reason = "WRONG", f"outputs differ from eager's: {check.describe()}"
        return None
    return variant, per_call


def _time(result: RowResult, calls: dict[str, Callable], estimates: dict[str, float], o: RunOptions) -> None:
    """Time the checked variants interleaved; their figures and the row's ranking."""
    if not calls:
        return
    per_round = measure.calls_per_round(max(estimates.values()), o.round_s)
    timings = measure.interleave(calls, o.rounds, per_round, o.device)
    for name, t in timings.items():
        vr = result.variants[name]
        vr.median_ms, vr.low_ms, vr.high_ms = t.median_ms, t.low_ms, t.high_ms
        vr.samples_ms, vr.calls_per_round = list(t.samples_ms), t.calls
    ranking = measure.rank(timings)
    result.fastest, result.runner_up, result.tie = ranking.fastest, ranking.runner_up, ranking.tie


def _judge_row(result: RowResult) -> None:
    """The row's status from its variants': WRONG when any is; not run when none ran."""
    wrong = [n for n, v in result.variants.items() if v.status == "WRONG"]
    if wrong:
        result.status, result.reason = "WRONG", f"outputs differ from eager's: {', '.join(wrong)}"
    elif result.variants and all(v.status == "not run" for v in result.variants.values()):
        reasons = {v.reason for v in result.variants.values()}
        result.status, result.reason = "not run", reasons.pop() if len(reasons) == 1 else "no variant ran"


# ----------------------------------------------------------------- training


def run_training(row: RowSpec, o: RunOptions, bundles: Bundles, budget: Budget,
                 say: Callable[[str], None]) -> RowResult:
    result = RowResult.of(row)
    spec = models.load(row.source)
    inputs = models.at_batch((spec.args, spec.kwargs), row.batch)
    start = {n: p.detach().clone() for n, p in spec.module.named_parameters()}
    bundle = None
    if "aotc-fused" in o.train_variants and not budget.over():
        say(f"  {row.label}: aotc export + compile of the joint bundle (or reuse)")
        built, result.bundle = bundles.training(row)
        bundle = built.path if built else None
    shared = variants.TrainRow(row.source, inputs, row.optimizer, o.device, bundle)
    ready: dict[str, variants.Step] = {}
    estimates: dict[str, float] = {}
    updates: dict[str, dict[str, torch.Tensor]] = {}
    for name in o.train_variants:
        vr = result.variants[name] = VariantResult(name)
        if budget.over():
            vr.status, vr.reason = "not run", NOT_RUN_BUDGET
            continue
        started = time.perf_counter()
        step = _prepare_steps(name, shared, vr, start, updates, o)
        say(f"  {row.label}: {name}: {vr.describe()} ({time.perf_counter() - started:.1f} s)")
        if step is not None:
            ready[name], estimates[name] = step
    reference = updates.get("eager-fused")
    noise = rounding_noise_parameters(variants.gradient_sizes(shared)) if reference is not None else []
    if noise:
        result.note = ("parameters not compared, their gradient being rounding noise (Adam turns noise into "
                       f"full steps): {', '.join(noise)}")
    for name in list(ready):
        vr = result.variants[name]
        if reference is None:
            vr.status, vr.reason = "not run", "not run: no eager reference to check against"
            ready.pop(name)
            continue
        check = _check_updates(reference, updates[name], set(noise))
        vr.check = dataclasses.asdict(check)
        if not check.passed:
            vr.status, vr.reason = "WRONG", f"parameters after {o.check_steps} steps differ from eager's: " \
                                            f"{check.describe()}"
            ready.pop(name)
    _time(result, {n: s.step for n, s in ready.items()}, {n: estimates[n] for n in ready}, o)
    _judge_row(result)
    return result


def _prepare_steps(name: str, shared: variants.TrainRow, vr: VariantResult, start: dict, updates: dict,
                   o: RunOptions):
    """Build one training variant and take `check_steps` steps (the first timed: it
    compiles), keeping its parameter updates; (step, seconds per step) when it ran."""
    try:
        step = variants.build_step(name, shared)
        vr.setup_s = step.setup_s
        began = time.perf_counter()
        step.step()
        measure.sync(o.device)
        vr.first_call_s = time.perf_counter() - began
        for _ in range(o.check_steps - 1):
            step.step()
        updates[name] = {n: p.detach().cpu() - start[n] for n, p in step.parameters().items() if n in start}
        if len(updates[name]) != len(start):
            raise RuntimeError(f"its parameters are not the model's ({len(updates[name])} of {len(start)} named alike)")
        per_step = measure.seconds_per_call(step.step, max(1, o.warmup - o.check_steps), o.device)
    except variants.NotRun as e:
        vr.status, vr.reason = "not run", f"not run: {e}"
        return None
    except Exception as e:
        vr.status, vr.reason = "failed", _error(e)
        return None
    return step, per_step


# A parameter whose gradient is under this fraction of the model's largest is taken as
# getting rounding noise alone: a bias before a normalization, a key bias inside softmax
# (their exact gradient is zero). fp32 rounding leaves ~1e-7 of the values summed; 1e-5
# is a hundred times that, and still far below any gradient that trains something.
NOISE_GRADIENT = 1e-5


def rounding_noise_parameters(sizes: dict[str, float]) -> list[str]:
    """Parameters whose first-step gradient is rounding noise. Their updates are not
    compared: where the exact gradient is zero, each implementation's rounding gives
    another noise, and Adam, which divides by the gradient's own size, turns any noise
    into a full step of either sign."""
    largest = max(sizes.values(), default=0.0)
    return sorted(n for n, s in sizes.items() if 0 < s <= NOISE_GRADIENT * largest)


def _check_updates(reference: dict[str, torch.Tensor], got: dict[str, torch.Tensor],
                   skip: set[str]) -> measure.Check:
    names = sorted(n for n in reference if n not in skip)
    return measure.judge_updates([reference[n] for n in names], [got[n] for n in names])
