"""The benchmark's models and their inputs: model files found by name, example inputs
resized to a batch and cast to a dtype, and the aotc bundles built from them.

A bundle is exported from the CPU model (a bundle is device-neutral) and compiled for the
benchmark's device. Inference bundles get a dynamic batch dimension, so one bundle serves
every batch size; a model whose export refuses that gets one bundle per batch size.
"""

from __future__ import annotations

import copy
import functools
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from aotc._torch_compat import pytree

ROOT = Path(__file__).resolve().parents[2]
SEARCH = (ROOT / "aotc" / "tools" / "suite_models", ROOT / "sample_models")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
EXPORT_BATCH = 2  # torch.export specializes sizes 0 and 1: a dynamic dim is traced at 2
MAX_BATCH = 64

Inputs = tuple[tuple, dict]  # (args, kwargs), as forward takes them


class UnknownModel(ValueError):
    """A --models entry that names no model file."""


def resolve(name: str) -> Path:
    """A model file: a path, or a name in aotc's suite models or the sample models."""
    path = Path(name)
    if path.suffix == ".py" or path.exists():
        if not path.is_file():
            raise UnknownModel(f"model file '{name}' not found.")
        return path.resolve()
    for folder in SEARCH:
        if (folder / f"{name}.py").is_file():
            return folder / f"{name}.py"
    known = sorted(p.stem for folder in SEARCH for p in folder.glob("*.py") if not p.stem.startswith("_"))
    raise UnknownModel(f"no model '{name}'; give a model file's path or one of: {', '.join(known)}.")


def load(source: Path | str):
    """The model file's ModelSpec (aotc's own loader: build_model, example_inputs, loss),
    built once: every row and bundle copies this one model, so all start from the same
    weights even when the file does not seed its initialisation."""
    return _load(Path(source).resolve())


@functools.cache
def _load(source: Path):
    from aotc.sources.model_file import load_model

    return load_model(str(source))


def fresh_module(source: Path) -> torch.nn.Module:
    """A copy of the model file's model, to convert, move and train at will."""
    return copy.deepcopy(load(source).module)


def batch_of(inputs: Inputs) -> int | None:
    """The example's batch size: the leading size of its first tensor with a dimension."""
    for t in pytree.tree_leaves(inputs):
        if isinstance(t, torch.Tensor) and t.dim() > 0:
            return t.shape[0]
    return None


def _batched(t, batch: int | None) -> bool:
    return isinstance(t, torch.Tensor) and t.dim() > 0 and batch is not None and t.shape[0] == batch


def at_batch(inputs: Inputs, size: int) -> Inputs:
    """The inputs with their batch dimension resized to `size`: rows repeated (token ids
    stay the ids they were) or cut; tensors without the batch dimension kept."""
    batch = batch_of(inputs)

    def resize(t):
        if not _batched(t, batch):
            return t
        reps = -(-size // batch)
        return t.repeat(reps, *([1] * (t.dim() - 1)))[:size].clone()

    return pytree.tree_map(resize, inputs)


def cast(inputs: Inputs, dtype: torch.dtype) -> Inputs:
    """Floating tensors cast to `dtype`; integer inputs (token ids, masks) kept."""
    return pytree.tree_map(lambda t: t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t,
                           inputs)


def to_device(inputs: Inputs, device: torch.device) -> Inputs:
    return pytree.tree_map(lambda t: t.to(device) if isinstance(t, torch.Tensor) else t, inputs)


def batch_dynamic_shapes(module: torch.nn.Module, inputs: Inputs, max_batch: int) -> dict:
    """torch.export's dynamic_shapes by forward's argument names: dim 0 of every batched
    tensor is one Dim `batch`, from 1 (aotc replays the small sizes) to `max_batch`."""
    from torch.export import Dim

    from aotc.sources.model_file import forward_arg_names

    args, kwargs = inputs
    batch, dim = batch_of(inputs), Dim("batch", min=1, max=max_batch)
    names = forward_arg_names(module, args, kwargs) + list(kwargs)
    values = [*args, *kwargs.values()]
    return {n: pytree.tree_map(lambda t: {0: dim} if _batched(t, batch) else None, v) for n, v in zip(names, values)}


@dataclass(frozen=True)
class BuiltBundle:
    """An aotc bundle compiled for the device. `dynamic`: one bundle for every batch size;
    `export_s`/`compile_s` the seconds of `aotc.export` and `aotc.compile`; `cached`:
    aotc's compile cache already held every graph (the compile time is then a lookup's)."""

    path: Path
    dynamic: bool
    export_s: float
    compile_s: float
    cached: bool

    def as_json(self) -> dict:
        return {"path": str(self.path), "dynamic_batch": self.dynamic, "export_s": round(self.export_s, 2),
                "compile_s": round(self.compile_s, 2), "compile_cached": self.cached}


def compile_for(path: Path, device: torch.device) -> tuple[float, bool]:
    """`aotc.compile` the bundle for the device: (seconds, whether every graph was cached)."""
    import aotc

    events: list[str] = []
    start = time.perf_counter()
    aotc.compile(path, devices=(device.type,), on_graph=lambda kind, dev, event: events.append(event))
    done = [e for e in events if e != "start"]
    return time.perf_counter() - start, bool(done) and all(e == "cached" for e in done)


def export_inference(source: Path, dtype: torch.dtype, path: Path, device: torch.device, batch: int | None,
                     max_batch: int = MAX_BATCH) -> BuiltBundle:
    """The model's inference bundle in `dtype`: with a dynamic batch (`batch` None), else
    static at `batch`."""
    import aotc

    spec = load(source)
    module = fresh_module(source).to(dtype).eval()
    inputs = cast(at_batch((spec.args, spec.kwargs), EXPORT_BATCH if batch is None else batch), dtype)
    shapes = batch_dynamic_shapes(module, inputs, max_batch) if batch is None else None
    start = time.perf_counter()
    aotc.export(module, inputs, path, dynamic_shapes=shapes, force=True, name=source.stem)
    export_s = time.perf_counter() - start
    compile_s, cached = compile_for(path, device)
    return BuiltBundle(path, batch is None, export_s, compile_s, cached)


def training_optimizer(name: str, params, fused: bool | None = None) -> torch.optim.Optimizer:
    """The training rows' optimizers: SGD with momentum 0.9, or AdamW (torch's defaults
    otherwise); `fused` as torch.optim takes it (None: torch's default, foreach on CUDA)."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-2, momentum=0.9, fused=fused)
    return torch.optim.AdamW(params, lr=1e-3, fused=fused)


def export_training(source: Path, optimizer: str, batch: int, path: Path, device: torch.device) -> BuiltBundle:
    """The model's joint bundle that carries `optimizer` (fp32, static at `batch`): its
    `train_step` runs loss, gradients and the update in one graph."""
    import aotc

    spec = load(source)
    module = fresh_module(source)
    inputs = at_batch((spec.args, spec.kwargs), batch)
    start = time.perf_counter()
    aotc.export(module, inputs, path, graphs=("joint",), loss=spec.training_loss(),
                optimizer=training_optimizer(optimizer, module.parameters()), force=True, name=source.stem)
    export_s = time.perf_counter() - start
    compile_s, cached = compile_for(path, device)
    return BuiltBundle(path, False, export_s, compile_s, cached)
