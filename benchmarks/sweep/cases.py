"""One sweep case: a model class built from a small config with random weights, and the
inputs its users call it with (`model(**inputs)`).

The zoos (zoo_transformers, zoo_timm, zoo_diffusers) list cases; the runner (run.py) builds
each one in a child process, so a case must build from nothing but its library, with no
download, and be deterministic: `build()` seeds torch itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch


@dataclass(frozen=True)
class Case:
    name: str      # unique and stable, e.g. "transformers/llama/causal-lm"; the table's row
    library: str   # "transformers" | "timm" | "diffusers"
    family: str    # model_type, timm family, or diffusers class
    head: str      # "base", "causal-lm", "masked-lm", "seq-cls", "image-cls", "speech", ...
    build: Callable[[], tuple[torch.nn.Module, dict[str, Any]]] = field(repr=False, compare=False)
    # build() -> (model in eval mode, keyword inputs); the model is called as model(**inputs)
    venv: str = "main"  # "main": .venv (torch 2.13); "torch-2.14.1": build/venv-torch-2.14.1 (timm)


def seeded(seed: int = 0) -> None:
    torch.manual_seed(seed)


@torch.no_grad()
def unzero(model: torch.nn.Module) -> None:
    """Re-initialise parameters that start all zero, biases aside: zero heads (hiera, gMLP),
    zero last-BN gammas (ResNets' zero_init_last), zero relative-position tables, ControlNet's
    zero convs. Left zero, what they multiply never reaches the output, so comparing an export
    with eager would not see it. Matrices and kernels get the default Linear/Conv init; scales
    and gates (1-D) a value near their usual 1. Parameters a class leaves uninitialised
    (`torch.empty`: NucleusMoE's experts), where that memory holds NaN or huge values, get the
    same: they made eager's own gradients NaN in some processes and not in others."""
    for name, p in model.named_parameters():
        if not p.is_floating_point() or not p.numel():
            continue
        garbage = not p.isfinite().all() or p.abs().max() > 1e4
        if not garbage and (name.endswith("bias") or p.any()):
            continue
        if p.dim() >= 2:
            torch.nn.init.kaiming_uniform_(p, a=5 ** 0.5)
        else:
            torch.nn.init.uniform_(p, 0.5, 1.5)
