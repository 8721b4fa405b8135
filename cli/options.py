"""One options dataclass per command family, filled from Click's keyword arguments.

A command decorated with `grouped(ExportOptions, "export")` receives its export options
as one `export=ExportOptions(...)` argument instead of a dozen keywords, and passes that
object on; the Click decorators that declare the options stay next to it.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ExportOptions:
    """What `aotc export MODEL` and `aotc compile MODEL` capture, and where to."""

    output: Path | None = None
    joint: bool = False
    autograd: bool = False
    train: bool = False
    entry: str | None = None
    task: str | None = None
    max_cache_len: int = 256
    batch_size: int = 1
    checkpoint: Path | None = None
    dynamic: tuple[str, ...] = ()
    static: tuple[str, ...] = ()
    partitioner: str = "min-cut"
    force: bool = False
    with_onnx: bool = False
    opset: int | None = None
    regions: str | None = None
    optimizer: str | None = None
    lr: float | None = None
    momentum: float | None = None
    weight_decay: float | None = None
    nesterov: bool = False
    betas: str | None = None
    eps: float | None = None


@dataclass(frozen=True)
class RunOptions:
    """How `aotc run` loads and calls a bundle."""

    inputs_path: Path | None = None
    output_path: Path | None = None
    backend: str = "auto"
    device: str = "cpu"
    mode: str | None = None
    seed: int = 0
    model: str | None = None


@dataclass(frozen=True)
class GenerateOptions:
    """`aotc run --prompt-ids`: what to generate and how tokens are chosen."""

    prompt_ids: str | None = None
    max_new_tokens: int = 20
    do_sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None


def grouped(cls: type, name: str) -> Callable[[Callable], Callable]:
    """Collect the keyword arguments named like `cls`'s fields into `name=cls(...)`."""
    fields = {f.name for f in dataclasses.fields(cls)}

    def decorate(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            values = {k: kwargs.pop(k) for k in list(kwargs) if k in fields}
            return fn(*args, **kwargs, **{name: cls(**values)})

        return wrapper

    return decorate
