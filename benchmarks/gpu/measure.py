"""Judging and timing: is a variant's output eager's, and how long does a call take.

`judge` compares every tensor leaf of two outputs under per-dtype tolerances; `interleave`
times several callables round-robin, so that clock drift, thermal state and other tenants
of the machine fall on every variant alike.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

# (rtol, atol) per dtype; atol is scaled by the reference leaf's largest magnitude (at
# least 1), because a reordered sum errs in proportion to the values summed, and these
# outputs range from tenths (an MLP) to tens (logits). fp32: kernels that fuse and reorder
# sums (inductor's Triton, cuBLAS picking another algorithm per shape) differ from eager by
# a few ulps per op; 1e-3 leaves room for that over a few layers and still catches a wrong
# graph, which is off by the order of the values themselves. bf16 keeps 8 significant bits
# (one rounding is 2^-8 ~ 4e-3 relative) and a fused kernel rounds at other places than
# eager does, so 2e-2, aotc's own bf16 rtol (aotc.tools.reference), here on the output's
# scale too. A variant outside these still passes when it is as close to float64 as eager
# (judge_against_truth).
TOLERANCES = {torch.float32: (1e-3, 1e-3), torch.bfloat16: (2e-2, 2e-2), torch.float16: (1e-2, 1e-2)}


@dataclass(frozen=True)
class Check:
    """The verdict on one variant's output against eager's: `passed`, the largest
    absolute difference over every leaf and the leaf it was found in, the tolerances
    used there (atol already scaled), and why it failed when that is not a number."""

    passed: bool
    max_abs: float
    worst_leaf: int
    rtol: float
    atol: float
    note: str = ""

    def describe(self) -> str:
        if self.note:
            return self.note
        return (f"leaf {self.worst_leaf}: max |diff| {self.max_abs:.3g} "
                f"(rtol {self.rtol:g}, atol {self.atol:.3g})")


def tolerance(want: torch.Tensor, scale: float | None = None) -> tuple[float, float]:
    """(rtol, atol) for a reference leaf, atol scaled by `scale` (default: the leaf's
    largest magnitude, at least 1); integers and bools must match exactly."""
    if not want.is_floating_point():
        return 0.0, 0.0
    rtol, atol = TOLERANCES.get(want.dtype, TOLERANCES[torch.float32])
    if scale is None:
        scale = max(1.0, want.detach().abs().max().item()) if want.numel() else 1.0
    return rtol, atol * scale


def judge(expected: Sequence[torch.Tensor], got: Sequence[torch.Tensor],
          scales: Sequence[float] | None = None) -> Check:
    """Whether every leaf of `got` matches `expected` (same count, shapes and dtypes;
    values within `tolerance`, atol scaled by `scales` where given); NaNs must sit where
    eager's are."""
    if len(expected) != len(got):
        return Check(False, float("nan"), -1, 0.0, 0.0, f"{len(got)} output tensors where eager has {len(expected)}")
    if not expected:
        return Check(False, float("nan"), -1, 0.0, 0.0, "eager's output holds no tensor to compare")
    worst = Check(True, 0.0, -1, 0.0, 0.0)
    for i, (want, have) in enumerate(zip(expected, got)):
        if tuple(want.shape) != tuple(have.shape) or want.dtype != have.dtype:
            return Check(False, float("nan"), i, 0.0, 0.0, f"leaf {i} is {have.dtype} {tuple(have.shape)}, "
                                                            f"eager's is {want.dtype} {tuple(want.shape)}")
        rtol, atol = tolerance(want, scales[i] if scales is not None else None)
        want, have = want.detach().cpu().to(torch.float64), have.detach().cpu().to(torch.float64)
        close = torch.isclose(have, want, rtol=rtol, atol=atol, equal_nan=True)
        diff = (have - want).abs().nan_to_num(0.0)
        max_abs = diff.max().item() if diff.numel() else 0.0
        if not bool(close.all()):
            return Check(False, max_abs, i, rtol, atol)
        if max_abs >= worst.max_abs:
            worst = Check(True, max_abs, i, rtol, atol)
    return worst


# A variant outside eager's tolerance still passes when it is no further from the float64
# result than this multiple of eager's own distance from it: bf16 kernels that keep fp32
# inside a fused kernel differ from eager by more than eager's rounding, yet are at least
# as accurate. PyTorch's own accuracy check (torch._dynamo.utils.same with an fp64
# reference) judges compiled models the same way.
TRUTH_MULTIPLIER = 3.0


def judge_against_truth(expected: Sequence[torch.Tensor], got: Sequence[torch.Tensor],
                        truth: Sequence[torch.Tensor]) -> Check:
    """Whether every leaf of `got` is within TRUTH_MULTIPLIER times eager's (`expected`)
    largest error against `truth` (eager in float64 on the same weights and inputs)."""
    if not len(expected) == len(got) == len(truth):
        return Check(False, float("nan"), -1, 0.0, 0.0, f"{len(got)} output tensors where eager has {len(expected)}")
    worst = 0.0
    for i, (want, have, exact) in enumerate(zip(expected, got, truth)):
        if tuple(want.shape) != tuple(have.shape) or want.dtype != have.dtype:
            return judge([want], [have])  # the shape or dtype message
        want, have, exact = (t.detach().cpu().to(torch.float64) for t in (want, have, exact))
        if not bool((want.isnan() == have.isnan()).all()):
            return Check(False, float("nan"), i, 0.0, 0.0, f"leaf {i}: NaNs where eager has none, or none where it has")
        eager_error = (want - exact).abs().nan_to_num(0.0).max().item() if want.numel() else 0.0
        error = (have - exact).abs().nan_to_num(0.0).max().item() if have.numel() else 0.0
        limit = TRUTH_MULTIPLIER * eager_error + 1e-7 * max(1.0, exact.abs().nan_to_num(0.0).max().item())
        diff = (have - want).abs().nan_to_num(0.0).max().item() if want.numel() else 0.0
        worst = max(worst, diff)
        if error > limit:
            return Check(False, diff, i, 0.0, 0.0, f"leaf {i}: max |diff| {diff:.3g} from eager; error against "
                                                  f"float64 {error:.3g}, over {TRUTH_MULTIPLIER:g}x eager's own "
                                                  f"({eager_error:.3g})")
    return Check(True, worst, -1, 0.0, 0.0, f"outside eager's tolerance (max |diff| {worst:.3g}), but no further "
                                            f"from float64 than {TRUTH_MULTIPLIER:g}x eager's own error")


def judge_updates(expected: Sequence[torch.Tensor], got: Sequence[torch.Tensor]) -> Check:
    """Whether parameter updates (after the steps minus before) match eager's. Each
    update's atol is scaled by its own largest change, so that an optimizer step gone
    wrong (no momentum, another learning rate) fails on every parameter; a parameter that
    barely moves (under 1% of the largest change in the model) is held to 1% of that
    largest change instead, since its update is mostly the rounding of its weights."""
    sizes = [d.detach().abs().max().item() if d.numel() else 0.0 for d in expected]
    floor = max(1e-2 * max(sizes, default=0.0), 1e-30)
    return judge(expected, got, [max(s, floor) for s in sizes])


def tensor_leaves(out) -> list[torch.Tensor]:
    """Every tensor of an output pytree (a ModelOutput, a tuple, a tensor), in order; a
    mapping pytree does not know (an output class its library did not register) is
    opened too, so that no output passes the check unseen."""
    from aotc._torch_compat import pytree

    tensors = []
    for leaf in pytree.tree_leaves(out):
        if isinstance(leaf, torch.Tensor):
            tensors.append(leaf)
        elif isinstance(leaf, Mapping):
            tensors += tensor_leaves(list(leaf.values()))
    return tensors


def snapshot(out) -> list[torch.Tensor]:
    """The output's tensors copied, before a later call can overwrite them (CUDA graphs
    replay into the same memory)."""
    return [t.detach().clone() for t in tensor_leaves(out)]


# ----------------------------------------------------------------- timing


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds_per_call(fn: Callable[[], object], calls: int, device: torch.device) -> float:
    """Wall seconds per call of `calls` calls, from an idle device to an idle device."""
    sync(device)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync(device)
    return (time.perf_counter() - start) / calls


def round_ms(fn: Callable[[], object], calls: int, device: torch.device) -> float:
    """Milliseconds per call over `calls` back-to-back calls. On CUDA the clock is a pair
    of events on the stream, recorded from an idle GPU: the span covers the CPU's launch
    overhead (the GPU waits for it) without counting the final synchronize's wake-up."""
    if device.type != "cuda":
        return seconds_per_call(fn, calls, device) * 1e3
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize(device)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


@dataclass(frozen=True)
class Timing:
    """One variant's per-call milliseconds, one sample per round (each the mean of
    `calls` back-to-back calls)."""

    samples_ms: tuple[float, ...]
    calls: int

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def low_ms(self) -> float:
        return min(self.samples_ms)

    @property
    def high_ms(self) -> float:
        return max(self.samples_ms)


def calls_per_round(slowest_s: float, target_s: float, low: int = 3, high: int = 200) -> int:
    """How many calls make a round of about `target_s` for the slowest variant: enough
    calls that a round outlasts the clock's resolution and the launch jitter."""
    if slowest_s <= 0:
        return high
    return max(low, min(high, round(target_s / slowest_s)))


def interleave(fns: dict[str, Callable[[], object]], rounds: int, calls: int,
               device: torch.device) -> dict[str, Timing]:
    """Time every callable for `rounds` rounds; each round runs them one after the other,
    the order rotated by one each round so none is always first (after a cold cache) or
    last (after the others heated the GPU)."""
    names = list(fns)
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        shift = r % len(names) if names else 0
        for name in names[shift:] + names[:shift]:
            samples[name].append(round_ms(fns[name], calls, device))
    return {n: Timing(tuple(s), calls) for n, s in samples.items()}


@dataclass(frozen=True)
class Ranking:
    """The fastest variant by median, the next, and whether their round-to-round
    ranges overlap (a tie: the order between them is within the noise)."""

    fastest: str | None
    runner_up: str | None
    tie: bool


def rank(timings: dict[str, Timing]) -> Ranking:
    ordered = sorted(timings, key=lambda n: timings[n].median_ms)
    if len(ordered) < 2:
        return Ranking(ordered[0] if ordered else None, None, False)
    best, nxt = timings[ordered[0]], timings[ordered[1]]
    return Ranking(ordered[0], ordered[1], best.high_ms >= nxt.low_ms)
