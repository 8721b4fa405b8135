"""What `aotc run` does, as library functions: load a bundle and call it once.

`run_bundle` calls a bundle on given or random inputs (a joint bundle runs one training
step); a regional bundle is applied to the model file's model and called on its example
inputs; `run_generation` generates tokens from a generation bundle. Each returns a
`RunResult`: the values by name, with the seconds spent loading and calling, and a
JSON summary; the CLI only parses arguments and prints it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from aotc._torch_compat import pytree
from aotc.bundle.files import Bundle
from aotc.bundle.schema import UserInput
from aotc.bundle.signing import require_signature
from aotc.contract.call_form import CallForm
from aotc.contract.call_inputs import IntInput
from aotc.contract.outputs import load_spec
from aotc.contract.subclasses import named_plain
from aotc.errors import AotcError, InputError
from aotc.runtime import load
from aotc.runtime.inputs import random_inputs
from aotc.runtime.regional import RegionalBundle, apply, is_regional
from aotc.runtime.subclasses import caller_inputs
from aotc.sources.model_file import load_model
from aotc.tools.generation import generate
from aotc.tools.observe import LOSS, grad_key


@dataclass
class RunResult:
    """One call of a bundle: `values` by name (outputs, or a joint step's loss and
    gradients; generated token ids), how it ran, and the seconds spent per phase."""

    bundle: str
    backend: str
    values: dict[str, Any]
    seconds: dict[str, float]
    facts: dict[str, Any] = field(default_factory=dict)  # device, mode, inputs, model, prompt
    tensors: bool = True  # values are tensors (else plain JSON values: generated ids)

    def summary(self) -> dict[str, Any]:
        """The JSON `aotc run --json` prints: tensors described (shape, dtype, min, max,
        mean) under "outputs"; plain values as they are."""
        values = {"outputs": [describe(k, v) for k, v in self.values.items()]} if self.tensors else self.values
        return {"bundle": self.bundle, "backend": self.backend, **self.facts,
                "seconds": {k: round(v, 4) for k, v in self.seconds.items()}, **values}


def describe(name: str, value) -> dict:
    if not isinstance(value, torch.Tensor):
        return {"name": name, "value": value}
    info = {"name": name, "shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch.")}
    if value.numel():
        v = value.detach().double()
        info |= {"min": v.min().item(), "max": v.max().item(), "mean": v.mean().item()}
    return info


def read_inputs(path: Path, user_inputs: list[UserInput], in_spec):
    """A safetensors file holding one tensor per input name, as the model's inputs (an
    int input declared dynamic as a 0-d integer tensor; constants are the bundle's)."""
    names = [u.name for u in user_inputs]

    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError) as e:
        raise InputError(f"the inputs file '{path}' is not a readable safetensors file ({e}).") from e
    missing = [n for n in names if n not in tensors]
    extra = sorted(set(tensors) - set(names))
    if missing or extra:
        raise InputError(
            f"the inputs file '{path}' must hold one tensor per input, named {', '.join(names)}; "
            f"missing: {', '.join(missing) or 'none'}; unexpected: {', '.join(extra) or 'none'}."
        )
    offsets = CallForm.of(in_spec, names, []).int_offsets()
    flat = []
    for u in user_inputs:
        t = tensors[u.name]
        if u.kind == "int":
            if t.dim() != 0 or t.is_floating_point() or t.is_complex() or t.dtype == torch.bool or int(t) < 0:
                raise InputError(f"the inputs file '{path}' holds '{u.name}' as a tensor of shape {tuple(t.shape)} "
                                 f"and dtype {t.dtype}; it is an int input: give it as a 0-d integer tensor >= 0.")
            t = IntInput.of(int(t), offsets[u.name]).carrier
        flat.append(t)
    return pytree.tree_unflatten(flat, in_spec)


def run_bundle(path: str | Path, *, inputs: Path | None = None, backend: str = "auto", device: str = "cpu",
               mode: str | None = None, seed: int = 0, model: str | None = None, trusted=(),
               public_keys=None) -> RunResult:
    """Load the bundle at `path` and call it once: on the tensors of `inputs` (a
    safetensors file) or random ones shaped like the example inputs (`seed`). A joint
    bundle runs one training step (its loss and gradients are the values); a regional
    bundle needs `model`, the model file it is applied to, called on its example inputs.
    `public_keys`: as for aotc.load; checked before the bundle is read."""
    require_signature(path, public_keys)
    if is_regional(path):
        return _run_regions(Path(path), model, backend, device, mode, trusted, public_keys)
    info = Bundle.open(path)
    if mode is None:
        mode = "eval" if {"inference", "prefill"} & set(info.graph_kinds) and not info.metadata.training else "train"
    t0 = time.perf_counter()
    module = load(path, backend=backend, device=device, mode=mode, trusted_subclasses=trusted, public_keys=public_keys)
    load_s = time.perf_counter() - t0
    in_spec = load_spec(info.signature.in_spec)
    if inputs:
        args, kwargs = caller_inputs(info, read_inputs(inputs, info.signature.user_inputs, in_spec), trusted)
        args, kwargs = pytree.tree_map_only(torch.Tensor, lambda t: t.to(module.device), (args, kwargs))
    else:
        args, kwargs = caller_inputs(info, random_inputs(info.metadata, in_spec, seed=seed, device=module.device),
                                     trusted)
    t0 = time.perf_counter()
    if "joint" in info.graph_kinds:
        values = {LOSS: module.train_step(*args, **kwargs)}
        values |= {grad_key(n): p.grad for n, p in module.named_parameters() if p.grad is not None}
    else:
        with torch.no_grad():
            out = module(*args, **kwargs)
        values = {f"output{pytree.keystr(p)}": v for p, v in pytree.tree_leaves_with_path(out)}
    call_s = time.perf_counter() - t0
    values = dict(pair for k, v in values.items() for pair in named_plain(k, v))  # subclasses as their inner tensors
    facts = {"device": str(module.device), "mode": mode, "inputs": str(inputs) if inputs else f"random (seed {seed})"}
    return RunResult(str(path), module.backend, values, {"load": load_s, "call": call_s}, facts)


def _run_regions(path: Path, model: str | None, backend: str, device: str, mode: str | None, trusted,
                 public_keys) -> RunResult:
    if not model:
        raise InputError(f"'{path}' is a regional bundle: name the model to apply it to (--model FILE).")
    spec = load_model(model)
    mode = mode or ("train" if RegionalBundle.open(path).manifest.graph_kinds != ["inference"] else "eval")
    t0 = time.perf_counter()
    applied = apply(path, spec.module.train(mode == "train"), backend=backend, device=device, mode=mode,
                    trusted_subclasses=trusted, public_keys=public_keys)
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    with torch.set_grad_enabled(mode == "train"):
        out = applied(*spec.args, **spec.kwargs)
    call_s = time.perf_counter() - t0
    values = {f"output{pytree.keystr(p)}": v for p, v in pytree.tree_leaves_with_path(out)}
    return RunResult(str(path), backend, values, {"apply": load_s, "call": call_s}, {"model": model})


def run_generation(path: str | Path, prompt: list[int], max_new_tokens: int, *, backend: str = "auto",
                   device: str = "cpu", do_sample: bool = False, temperature: float = 1.0, top_k: int | None = None,
                   top_p: float | None = None, seed: int = 0, public_keys=None) -> RunResult:
    """Generate up to `max_new_tokens` after `prompt` (token ids, for every sequence of
    the bundle's batch); the value "new_ids" holds the new tokens per sequence.
    `public_keys`: as for aotc.load; checked before the bundle is read."""
    require_signature(path, public_keys)
    info = Bundle.open(path)
    if info.manifest.generation is None:
        raise AotcError(
            f"generating needs a generation bundle (prefill and decode graphs); '{info.path}' has "
            f"{', '.join(info.graph_kinds)}. Export a causal LM folder with --task text-generation."
        )
    t0 = time.perf_counter()
    module = load(info.path, backend=backend, device=device, public_keys=public_keys)
    load_s = time.perf_counter() - t0
    ids = torch.tensor([prompt] * info.manifest.generation.batch_size)
    t0 = time.perf_counter()
    tokens = generate(module, ids, max_new_tokens, do_sample=do_sample, temperature=temperature, top_k=top_k,
                      top_p=top_p, seed=seed if do_sample else None)
    gen_s = time.perf_counter() - t0
    new = tokens[:, len(prompt):].tolist()
    facts = {"prompt_ids": prompt, "tokens_per_second": round(sum(map(len, new)) / gen_s, 2) if gen_s else None}
    return RunResult(str(info.path), module.backend, {"new_ids": new[0] if len(new) == 1 else new},
                     {"load": load_s, "generate": gen_s}, facts, tensors=False)
