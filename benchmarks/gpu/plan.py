"""What the benchmark runs, in which order, and the wall-clock budget it runs under.

The plan orders rows so that a run cut short by its budget has answered each of the
report's questions before it answers any again: first, model by model, the inference row
at the first dtype and batch (aotc against torch.compile and the raw runner, CUDA graphs
at batch 1) followed by that model's training row with the first optimizer (the fused
step); then the remaining batches and dtypes; then the other optimizers' training rows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

TRAIN_MODELS = ("bert", "gpt2", "resnet")
NOT_RUN_BUDGET = "not run: over the time budget"


@dataclass(frozen=True)
class RowSpec:
    """One row: a model at a dtype and batch, inference (every inference variant) or
    training (`optimizer` set: the training variants' steps)."""

    model: str
    source: Path
    dtype: str
    batch: int
    optimizer: str | None = None

    @property
    def kind(self) -> str:
        return "inference" if self.optimizer is None else "train"

    @property
    def label(self) -> str:
        step = f" train {self.optimizer}" if self.optimizer else ""
        return f"{self.model} {self.dtype} batch {self.batch}{step}"


@dataclass(frozen=True)
class PlanOptions:
    """The rows asked for: models (name -> model file), dtypes, batches, and training rows
    (`train`, at `train_batch`, for the models in `train_models`, each optimizer)."""

    models: dict[str, Path]
    dtypes: tuple[str, ...]
    batches: tuple[int, ...]
    train: bool
    train_models: tuple[str, ...] = TRAIN_MODELS
    train_batch: int = 16
    optimizers: tuple[str, ...] = ("sgd", "adamw")


def make_plan(o: PlanOptions) -> list[RowSpec]:
    """Every row, the most informative first (see the module docstring)."""
    combos = [(d, b) for d in o.dtypes for b in o.batches]
    inference = [[RowSpec(m, src, d, b) for m, src in o.models.items()] for d, b in combos]
    trained = [m for m in o.models if m in o.train_models] if o.train else []
    training = [[RowSpec(m, o.models[m], "fp32", o.train_batch, opt) for m in trained] for opt in o.optimizers]
    first_steps = {row.model: row for row in (training[0] if training else [])}
    first = []
    for row in inference[0] if inference else []:
        first += [row] + ([first_steps[row.model]] if row.model in first_steps else [])
    return first + [row for tier in inference[1:] + training[1:] for row in tier]


@dataclass
class Budget:
    """Wall-clock seconds for the whole run, counted from its creation."""

    seconds: float
    start: float = field(default_factory=time.perf_counter)

    def spent(self) -> float:
        return time.perf_counter() - self.start

    def left(self) -> float:
        return self.seconds - self.spent()

    def over(self) -> bool:
        return self.left() <= 0


@dataclass
class RowCosts:
    """What rows have cost so far, to judge what the budget still holds. Until a row has
    finished, `prior_s` stands for one."""

    prior_s: float
    seconds: list[float] = field(default_factory=list)

    def add(self, seconds: float) -> None:
        self.seconds.append(seconds)

    def typical(self) -> float:
        return sum(self.seconds) / len(self.seconds) if self.seconds else self.prior_s


def autotune_fits(budget: Budget, costs: RowCosts, rows_left: int, autotune_s: float) -> tuple[bool, str]:
    """Whether max-autotune may run in this row: only when, after it, the budget still
    holds the rows left at what rows have cost so far. Autotuning benchmarks every
    candidate kernel at compile, the slowest compile of all, so it is the first work to
    drop when the budget is short. (whether, the reason when not)."""
    need = autotune_s + rows_left * costs.typical()
    if budget.left() >= need:
        return True, ""
    return False, (f"not run: dropped to fit the time budget (max-autotune compiles slowest; {budget.left():.0f} s "
                   f"left, the {rows_left} rows after this one need ~{rows_left * costs.typical():.0f} s)")
