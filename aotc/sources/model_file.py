"""Model files: the convention `aotc export model.py` reads.

A model file defines `build_model()` (or another factory named with `--entry`),
`example_inputs()`, and optionally `loss(outputs, *inputs)` (with `loss_inputs()`, the
inputs only the loss reads: then `loss(outputs, *loss_inputs)`), `dynamic_shapes` and
`CHECKPOINT`. `package.module:factory` names a factory in an importable module instead.
Every mistake is reported as one `ModelFileError` paragraph naming the file.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from aotc.contract.loss_inputs import LossOverInputs
from aotc.errors import ModelFileError
from aotc.sources import hf_folder as hf
from aotc.sources.checkpoint import apply_checkpoint

DEFAULT_ENTRY = "build_model"


@dataclass
class ModelSpec:
    """A model ready to capture: the module, its example inputs and optional extras.

    `args`/`kwargs` are the example inputs exactly as forward takes them; `source` is what
    the user named (a path or `pkg.mod:factory`), kept in the manifest so a bundle can
    find its model again.
    """

    name: str
    source: str
    module: torch.nn.Module
    args: tuple
    kwargs: dict[str, Any] = field(default_factory=dict)
    loss: Callable[..., torch.Tensor] | None = None
    dynamic_shapes: Any = None
    checkpoint: Path | None = None
    task: str | None = None  # Hugging Face folders: the task the model was built for
    assets: dict[str, Path] = field(default_factory=dict)  # files copied into the bundle as they are
    # inputs only the loss reads (targets): then loss(outputs, *loss_inputs) (aotc.contract.loss_inputs)
    loss_inputs: tuple | None = None

    def training_loss(self):
        """The loss as a joint bundle's training call takes it (inputs, then loss inputs)."""
        if self.loss is None or not self.loss_inputs:
            return self.loss
        return LossOverInputs(self.loss, len(self.loss_inputs))


def _import_path(path: Path) -> ModuleType:
    if not path.exists():
        raise ModelFileError(
            f"Model file '{path}' not found. Give the path of a Python file that defines "
            f"{DEFAULT_ENTRY}() and example_inputs(), or 'package.module:factory'."
        )
    if path.suffix != ".py" or not path.is_file():
        raise ModelFileError(f"Model file '{path}' is not a .py file. Give a Python file.")
    # the same name in every process (str hashes are salted per process): a pickle that
    # names the model's class (torch.compile's aot_compile artifacts) finds it again
    mod_name = f"aotc_model_{path.stem}_{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        sys.modules.pop(mod_name, None)
        raise ModelFileError(
            f"Model file '{path}' has a syntax error at line {e.lineno}: {e.msg}. "
            "Fix the file and run again."
        ) from e
    except Exception as e:
        sys.modules.pop(mod_name, None)
        raise ModelFileError(
            f"Model file '{path}' raised {type(e).__name__} while importing: {e}. "
            f"{_where(e, path)}Run it with python to debug, or pass --debug for the traceback."
        ) from e
    return module


def _where(e: BaseException, path: Path) -> str:
    frames = [f for f in traceback.extract_tb(e.__traceback__) if Path(f.filename) == path.resolve() or f.filename == str(path)]
    return f"(line {frames[-1].lineno}) " if frames else ""


def _import_module_ref(ref: str) -> tuple[ModuleType, str]:
    module_name, _, factory = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ModelFileError(
            f"Cannot import module '{module_name}' named in '{ref}': {e}. "
            "Check the name and that it is importable (on sys.path)."
        ) from e
    return module, factory


def _call(fn: Callable, what: str, where: str) -> Any:
    try:
        return fn()
    except Exception as e:
        raise ModelFileError(
            f"{what}() in '{where}' raised {type(e).__name__}: {e}. "
            "Pass --debug for the traceback."
        ) from e


def split_inputs(value: Any, where: str) -> tuple[tuple, dict]:
    """(args, kwargs) of example inputs given as a tensor, a tuple of inputs, or (args, kwargs)."""
    if isinstance(value, torch.Tensor):
        return (value,), {}
    if (
        isinstance(value, (tuple, list))
        and len(value) == 2
        and isinstance(value[0], (tuple, list))
        and isinstance(value[1], dict)
    ):
        return tuple(value[0]), dict(value[1])
    if isinstance(value, (tuple, list)):
        return tuple(value), {}
    raise ModelFileError(
        f"example_inputs() in '{where}' returned a {type(value).__name__}; expected a tuple "
        "of inputs, or (args, kwargs) with a tuple and a dict."
    )


def load_model(
    target: str,
    entry: str | None = None,
    checkpoint: str | Path | None = None,
    task: str | None = None,
) -> ModelSpec:
    """Import a model file (or `pkg.mod:factory`), or read a Hugging Face folder, and build
    its model and inputs. `task` applies to folders only."""
    if Path(target).is_dir():
        return _load_folder(target, task, entry, checkpoint)
    if task is not None:
        raise ModelFileError(f"--task applies to a Hugging Face model folder; '{target}' is not a folder.")
    if ":" in target and not target.endswith(".py") and not Path(target).exists():
        module, factory_name = _import_module_ref(target)
        factory_name = entry or factory_name or DEFAULT_ENTRY
        where = target
        base_dir = Path(module.__file__).parent if getattr(module, "__file__", None) else Path.cwd()
        name = module.__name__.rsplit(".", 1)[-1]
    else:
        path = Path(target)
        module = _import_path(path)
        factory_name = entry or DEFAULT_ENTRY
        where = str(path)
        base_dir = path.resolve().parent
        name = path.stem

    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise ModelFileError(
            f"Model file '{where}' has no function '{factory_name}'. Define "
            f"{factory_name}() returning a torch.nn.Module"
            + (", or name another factory with --entry." if factory_name == DEFAULT_ENTRY else ".")
        )
    model = _call(factory, factory_name, where)
    if not isinstance(model, torch.nn.Module):
        raise ModelFileError(
            f"{factory_name}() in '{where}' returned a {type(model).__name__}, not a "
            "torch.nn.Module. Return the model instance."
        )

    example_fn = getattr(module, "example_inputs", None)
    if not callable(example_fn):
        raise ModelFileError(
            f"Model file '{where}' has no function 'example_inputs'. Define "
            "example_inputs() returning a tuple of inputs, or (args, kwargs)."
        )
    args, kwargs = split_inputs(_call(example_fn, "example_inputs", where), where)
    _check_forward_accepts(model, args, kwargs, where)

    loss = getattr(module, "loss", None)
    if loss is not None and not callable(loss):
        raise ModelFileError(f"'loss' in '{where}' is a {type(loss).__name__}, not a function.")
    loss_inputs = _loss_inputs(module, loss, where)

    ckpt_path = None
    if checkpoint is not None:
        ckpt_path = Path(checkpoint)
    elif getattr(module, "CHECKPOINT", None):
        ckpt_path = base_dir / module.CHECKPOINT
    if ckpt_path is not None:
        apply_checkpoint(model, ckpt_path)

    return ModelSpec(
        name=name,
        source=where,
        module=model,
        args=args,
        kwargs=kwargs,
        loss=loss,
        dynamic_shapes=getattr(module, "dynamic_shapes", None),
        checkpoint=ckpt_path,
        loss_inputs=loss_inputs,
    )


def _loss_inputs(module: ModuleType, loss, where: str) -> tuple | None:
    """`loss_inputs()`: the example inputs only the loss reads (targets), as a tuple."""
    fn = getattr(module, "loss_inputs", None)
    if fn is None:
        return None
    if not callable(fn):
        raise ModelFileError(f"'loss_inputs' in '{where}' is a {type(fn).__name__}, not a function.")
    if loss is None:
        raise ModelFileError(f"Model file '{where}' defines loss_inputs() but no loss(outputs, *loss_inputs) to "
                             "take them. Define loss, or drop loss_inputs.")
    value = _call(fn, "loss_inputs", where)
    if isinstance(value, torch.Tensor):
        value = (value,)
    if not isinstance(value, (tuple, list)) or not value:
        raise ModelFileError(f"loss_inputs() in '{where}' returned a {type(value).__name__}; expected a tuple of "
                             "the loss's inputs (targets), e.g. (labels,).")
    return tuple(value)


def _load_folder(target: str, task: str | None, entry, checkpoint) -> ModelSpec:

    if entry is not None or checkpoint is not None:
        raise ModelFileError(
            f"'{target}' is a model folder: its weights are its model.safetensors, and there is no "
            "factory to name. Drop --entry/--checkpoint."
        )
    folder = hf.load_folder(target, task)
    return ModelSpec(
        name=Path(target).resolve().name,
        source=str(target),
        module=folder.module,
        args=(),
        kwargs=folder.kwargs,
        dynamic_shapes=folder.dynamic_shapes,
        task=folder.task,
        assets=folder.assets,
    )


def _check_forward_accepts(model: torch.nn.Module, args: tuple, kwargs: dict, where: str) -> None:
    try:
        inspect.signature(model.forward).bind(*args, **kwargs)
    except TypeError as e:
        raise ModelFileError(
            f"example_inputs() in '{where}' does not fit {type(model).__name__}.forward"
            f"{inspect.signature(model.forward)}: {e}. Make them match."
        ) from e
    except ValueError:  # no signature available (builtins); torch will check at capture
        pass


class FunctionModule(torch.nn.Module):
    """Wraps a plain callable over tensors so it can be captured like a module."""

    def __init__(self, fn: Callable[..., Any]):
        super().__init__()
        self.fn = fn

    def forward(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


def forward_arg_names(model: torch.nn.Module, args: tuple, kwargs: dict) -> list[str]:
    """Names of forward's positional parameters for `args`: `args[0]`... for those a
    `*args` parameter gathers, `arg0`... when forward's signature is unknown."""
    target = model.fn if isinstance(model, FunctionModule) else model.forward
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    var = next((p for p in params if p.kind == p.VAR_POSITIONAL), None)
    names = []
    for i in range(len(args)):
        if i < len(positional):
            names.append(positional[i].name)
        elif var is not None:  # gathered by *args: named as forward reads them
            names.append(f"{var.name}[{i - len(positional)}]")
        else:
            names.append(f"arg{i}")
    return names
