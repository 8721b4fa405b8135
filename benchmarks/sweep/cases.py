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
