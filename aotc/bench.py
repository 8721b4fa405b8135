"""`aotc bench`: a bundle's backends against the strongest baselines, side by side.

Every variant runs in a fresh Python process (`python -m aotc.bench`), timed from before
the process starts to its first output (cold start), then for `iters` more calls
(steady state: median and p90); the child reports its peak RSS (CPU) or
`max_memory_allocated` (CUDA). With `train`, a call is a whole step: forward, backward
and an SGD step (for a joint bundle that carries its optimizer, that optimizer: the
baselines run torch.optim's with the same hyperparameters). The variants:

- `aotc <backend>`: `aotc.load(bundle)`, the whole wrapper stack, on the golden inputs;
- `aoti raw runner`: the compiled package's own `run` on flat tensors gathered once, no
  aotc code per call: the floor the wrapper stack is measured against (training: the
  forward and backward packages and a foreach SGD update, no buffer updates);
- `eager` and `torch.compile` (cold, then warm inductor cache) on the model the user
  names with `model`; for inference also `torch.compile freezing` (inductor's freezing,
  the baseline for a bundle compiled with `aotc compile --freeze`);
- `aot_compile`: torch.compile's own ahead-of-time artifact
  (`torch.compile(model.forward, fullgraph=True).aot_compile(...)`, then
  `save_compiled_function`), made in a process of its own that is not timed, then loaded
  with `torch.compiler.load_compiled_function` (a pickle; the model's class must be
  importable) with an empty inductor cache (cold) and with the one compiling left (warm).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

BASELINES = ("eager", "torch.compile", "aot_compile", "raw")
MODEL_BASELINES = ("eager", "torch.compile", "aot_compile")  # these rebuild the model from --model
RAW = "aoti raw runner"
AOT_NOTE = "pickle (AOTCompilePickler); needs the model's class importable"


@dataclass(frozen=True)
class Result:
    """One variant's figures; times in seconds (cold start) and microseconds (per call).
    With several runs (fresh processes), each figure is the median over the runs and
    `runs_median_us` lists every run's median. A baseline that failed has `error` set and
    no figures."""

    variant: str
    cold_start_s: float | None
    median_us: float | None
    p90_us: float | None
    iters: int
    calls_per_s: float | None
    peak_memory_mib: float | None
    note: str = ""
    error: str = ""
    runs_median_us: tuple[float, ...] = ()
    runs_cold_start_s: tuple[float, ...] = ()

    @property
    def spread(self) -> float | None:
        """(slowest - fastest) / median of the runs' medians; None with one run."""
        if len(self.runs_median_us) < 2 or not self.median_us:
            return None
        return (max(self.runs_median_us) - min(self.runs_median_us)) / self.median_us


def _combine(results: list[Result]) -> Result:
    """Several runs of one variant as one Result of medians."""
    if len(results) == 1:
        return results[0]
    med = statistics.median
    median = med(r.median_us for r in results)
    first = results[0]
    return Result(first.variant, med(r.cold_start_s for r in results), median, med(r.p90_us for r in results),
                  first.iters, 1e6 / median if median else 0.0, max(r.peak_memory_mib for r in results), first.note,
                  runs_median_us=tuple(r.median_us for r in results),
                  runs_cold_start_s=tuple(r.cold_start_s for r in results))


def _peak_rss_mib() -> float:
    """This process's peak RSS. /proc's VmHWM starts afresh at exec; ru_maxrss keeps the
    parent's high-water mark across fork+exec, which would report the benchmark driver."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ----------------------------------------------------------------- in the child process


def _inputs(spec: dict, device):
    """(args, kwargs) on `device`: the bundle's golden inputs, or a regional bundle's
    model file's example inputs."""
    import torch

    from aotc._torch_compat import pytree

    if spec.get("regional"):
        from aotc.model_file import load_model

        example = load_model(spec["source"])
        inputs = (example.args, example.kwargs)
    else:
        from aotc.bundle import Bundle
        from aotc.parity import _golden, _golden_inputs

        bundle = Bundle.open(spec["bundle"], verify_hashes=False)
        inputs = _golden_inputs(bundle, _golden(bundle), spec["trusted"])
    return pytree.tree_map_only(torch.Tensor, lambda t: t.to(device), inputs)


def _model_step(spec: dict, device):
    """A step over a model: aotc's loaded bundle, eager, torch.compile or an aot_compile
    artifact; returns step()."""
    import torch

    from aotc._torch_compat import pytree

    variant, train = spec["variant"], spec["train"]
    regional = spec.get("regional", False)
    joint = False
    loss_fn = None
    if variant.startswith("aotc"):
        import aotc

        if regional:
            from aotc.model_file import load_model

            model = aotc.apply(spec["bundle"], load_model(spec["source"]).module.to(device).train(train),
                               backend=spec["backend"], device=device, trusted_subclasses=spec["trusted"])
        else:
            model = aotc.load(spec["bundle"], backend=spec["backend"], device=device,
                              mode="train" if train else "eval", trusted_subclasses=spec["trusted"])
            joint = "joint" in model._programs
        call = model
        if train and not joint and spec["source"]:
            from aotc.model_file import load_model

            loss_fn = load_model(spec["source"]).loss
    else:
        from aotc.model_file import load_model

        loaded = load_model(spec["source"])
        model = loaded.module.to(device).train(train)
        loss_fn = loaded.loss
        call = model
        if variant.startswith("torch.compile freezing"):  # weights folded in, as `aotc compile --freeze`
            from aotc import _torch_compat as tc

            tc.inductor_freezing_on()  # a process of its own: nothing else compiles here
            call = torch.compile(model)
        elif variant.startswith("torch.compile"):
            call = torch.compile(model)
        elif variant.startswith("aot_compile"):
            with open(spec["artifact"], "rb") as f:
                compiled = torch.compiler.load_compiled_function(f)

            def call(*a, **k):
                return compiled(model, *a, **k)
    args, kwargs = _inputs(spec, device)
    optimizer = _optimizer(spec, model) if train and not (joint and model.optimizer is not None) else None

    def step():
        if not train:
            with torch.no_grad():
                return call(*args, **kwargs)
        if joint:
            loss = model.train_step(*args, **kwargs)
            if optimizer is None:  # the bundle's graph ran the optimizer
                return loss
        else:
            out = call(*args, **kwargs)
            loss = loss_fn(out, *args, **kwargs) if loss_fn else sum(o.float().sum() for o in pytree.tree_leaves(out))
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss

    return step


def _optimizer(spec: dict, model):
    """The optimizer a training step runs: the one a joint bundle carries (for the
    baselines, torch.optim's own with its hyperparameters), else SGD with lr 1e-3."""
    import torch

    from aotc.bundle import Bundle

    info = None if spec.get("regional") else Bundle.open(spec["bundle"], verify_hashes=False).metadata.optimizer
    if info is None:
        return torch.optim.SGD(model.parameters(), lr=1e-3)
    from aotc import optimizers

    return optimizers.build(info, model, optimizers.initial_state(info, None, model))


def _child(spec: dict) -> None:
    """Runs in the child process: build the variant, time it, print one JSON line."""
    import torch

    from aotc.devices import resolve_device

    torch.set_num_threads(spec["threads"])
    device = resolve_device(spec["device"])
    from aotc.bench_raw import raw_step

    step = raw_step(spec, device) if spec["variant"] == RAW else _model_step(spec, device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    step()
    sync()
    print("FIRST", flush=True)
    for _ in range(spec["warmup"]):
        step()
    times = []
    for _ in range(spec["iters"]):
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) / 2**20
    else:
        peak = _peak_rss_mib()
    times.sort()
    print(json.dumps({
        "median_us": statistics.median(times) * 1e6,
        "p90_us": times[min(len(times) - 1, int(0.9 * len(times)))] * 1e6,
        "peak_memory_mib": peak,
    }), flush=True)


def _prepare_aot(spec: dict) -> None:
    """Runs in a process of its own: aot_compile the model on the bundle's inputs and save it."""
    import torch

    from aotc.devices import resolve_device
    from aotc.model_file import load_model

    torch.set_num_threads(spec["threads"])
    device = resolve_device(spec["device"])
    model = load_model(spec["source"]).module.to(device).train(spec["train"])
    args, kwargs = _inputs(spec, device)
    with torch.no_grad() if not spec["train"] else contextlib.nullcontext():
        compiled = torch.compile(model.forward, fullgraph=True).aot_compile((args, kwargs))
    compiled.save_compiled_function(spec["artifact"])


# ----------------------------------------------------------------- in the driver


def _last_line(err: str) -> str:
    return ([ln for ln in err.strip().splitlines() if ln.strip()][-1:] or ["no output"])[0]


def run_variant(variant: str, spec: dict, env: dict | None = None, repeats: int = 1) -> Result:
    """Run one variant in `repeats` fresh processes, one after the other; their medians."""
    return _combine([_run_once(variant, spec, env) for _ in range(repeats)])


def _run_once(variant: str, spec: dict, env: dict | None) -> Result:
    """Run one variant in a fresh process and collect its figures."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "aotc.bench", json.dumps({**spec, "variant": variant})],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env or os.environ.copy(),
    )
    first, figures = None, None
    for line in proc.stdout:
        if line.startswith("FIRST") and first is None:
            first = time.perf_counter() - start
        elif line.startswith("{"):
            figures = json.loads(line)
    err = proc.stderr.read()
    if proc.wait() != 0 or first is None or figures is None:
        from aotc.errors import AotcError

        raise AotcError(f"benchmark variant '{variant}' failed: {_last_line(err)}")
    median = figures["median_us"]
    return Result(variant, first, median, figures["p90_us"], spec["iters"], 1e6 / median if median else 0.0,
                  figures["peak_memory_mib"], note=AOT_NOTE if variant.startswith("aot_compile") else "")


def _failed(variant: str, spec: dict, error: str) -> Result:
    return Result(variant, None, None, None, spec["iters"], None, None, error=error)


def bench(path, backends=None, baselines=BASELINES, iters: int = 100, warmup: int = 10, device: str = "cpu",
          train: bool = False, threads: int = 1, on_variant=None, model: str | None = None,
          trusted_subclasses=(), repeats: int = 1) -> list[Result]:
    """Benchmark every backend of the bundle (or `backends`) and the baselines; eager,
    torch.compile and aot_compile rebuild the model from `model` (a model file or
    pkg.mod:factory the caller names; a path recorded in the bundle is never imported).
    Each variant runs in `repeats` fresh processes (the cold-cache ones once: a second
    run would find the cache warm)."""
    from aotc.bundle import Bundle
    from aotc.errors import AotcError
    from aotc.parity import artifacts

    from aotc.regional_bundle import is_regional

    if is_regional(path):
        return _bench_regions(path, backends, baselines, iters, warmup, device, train, threads, on_variant, model,
                              trusted_subclasses, repeats)
    bundle = Bundle.open(path)
    found, _ = artifacts(bundle)
    available = [(label, backend) for label, backend, dev in found if dev == device or backend == "onnx"]
    if backends:
        unknown = set(backends) - {b for _, b in available}
        if unknown:
            raise AotcError(
                f"Bundle '{bundle.path}' has no {', '.join(sorted(unknown))} artifact for {device}; it has "
                f"{', '.join(b for _, b in available)}."
            )
        available = [(label, b) for label, b in available if b in backends]
    training = times_training(bundle, train)
    _need_model(baselines, model)
    spec = {"bundle": str(bundle.path), "source": model, "device": device, "iters": iters, "warmup": warmup,
            "train": training, "threads": threads, "backend": None, "trusted": _names(trusted_subclasses),
            "repeats": repeats}
    joint = " joint" if "joint" in bundle.graph_kinds else ""  # a whole training step in one graph
    if bundle.metadata.optimizer is not None:  # ... optimizer included
        joint += f"+{bundle.metadata.optimizer.name}"
    variants = [(f"aotc{joint} {label}", {"backend": backend}) for label, backend in available]
    if "raw" in baselines and any(b == "aoti" for _, b in available):
        variants.append((RAW, {}))
    return _run_variants(spec, variants, baselines, on_variant)


def times_training(bundle, train: bool) -> bool:
    """Whether bench times training steps: asked for, or the bundle has nothing else."""
    return train or bundle.metadata.training and "inference" not in bundle.graph_kinds


def _need_model(baselines, model) -> None:
    rebuilding = [b for b in baselines if b in MODEL_BASELINES]
    if rebuilding and not model:
        from aotc.errors import AotcError

        raise AotcError(
            f"the {' and '.join(rebuilding)} baseline(s) rebuild the model: name its file with --model "
            "(model=), or pass --baselines none to time the bundle alone. aotc never runs a model file "
            "a bundle names."
        )


def _bench_regions(path, backends, baselines, iters, warmup, device, train, threads, on_variant, model,
                   trusted_subclasses, repeats=1) -> list[Result]:
    """A regional bundle: the model file's model with the regions applied (fx; aoti when
    every group is compiled) on its example inputs, against the baselines."""
    from aotc.errors import AotcError
    from aotc.regional_bundle import RegionalBundle

    if not model:
        raise AotcError(f"'{path}' is a regional bundle: name the model to apply it to with --model (model=).")
    rb = RegionalBundle.open(path)
    compiled = all(any(f.kind == "compiled" and f.device == device for f in b.manifest.files) for b in rb.groups.values())
    available = [b for b in ("fx", "aoti") if b == "fx" or compiled]
    if backends:
        unknown = set(backends) - set(available)
        if unknown:
            raise AotcError(f"'{path}' has no {', '.join(sorted(unknown))} artifacts for every group; it has "
                            f"{', '.join(available)}.")
        available = [b for b in available if b in backends]
    spec = {"bundle": str(rb.path), "source": model, "device": device, "iters": iters, "warmup": warmup,
            "train": train or rb.manifest.graph_kinds != ["inference"], "threads": threads, "backend": None,
            "regional": True, "trusted": _names(trusted_subclasses), "repeats": repeats}
    return _run_variants(spec, [(f"aotc regions {b}", {"backend": b}) for b in available], baselines, on_variant)


def _run_variants(spec: dict, variants: list, baselines, on_variant) -> list[Result]:
    """Each of aotc's `variants`, then the baselines, in a fresh process each. torch.compile
    and aot_compile get a cold inductor cache of their own, then the cache their first
    run (or the aot_compile preparation) left. A baseline that fails is reported, not fatal."""
    results = []
    repeats = spec.get("repeats", 1)
    for name, extra in variants:
        if on_variant:
            on_variant(name)
        results.append(run_variant(name, {**spec, **extra}, repeats=repeats))
    if "eager" in baselines:
        results.append(_baseline("eager", spec, None, on_variant, repeats=repeats))
    if "torch.compile" in baselines:
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
            results.append(_baseline("torch.compile (cold cache)", spec, env, on_variant))
            results.append(_baseline("torch.compile (warm cache)", spec, env, on_variant, repeats=repeats))
        if not spec["train"]:  # freezing folds weights that training would change
            with tempfile.TemporaryDirectory() as cache:
                env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
                results.append(_baseline("torch.compile freezing (cold cache)", spec, env, on_variant))
                results.append(_baseline("torch.compile freezing (warm cache)", spec, env, on_variant, repeats=repeats))
    if "aot_compile" in baselines and not spec.get("regional"):
        results += _aot_compile_variants(spec, on_variant)
    return results


def _baseline(name: str, spec: dict, env: dict | None, on_variant, extra: dict | None = None,
              repeats: int = 1) -> Result:
    if on_variant:
        on_variant(name)
    from aotc.errors import AotcError

    try:
        return run_variant(name, {**spec, **(extra or {})}, env, repeats)
    except AotcError as e:
        return _failed(name, spec, str(e))


def _aot_compile_variants(spec: dict, on_variant) -> list[Result]:
    names = ("aot_compile (cold cache)", "aot_compile (warm cache)")
    with tempfile.TemporaryDirectory() as tmp:
        warm, artifact = Path(tmp) / "warm-cache", str(Path(tmp) / "compiled.bin")
        if on_variant:
            on_variant("aot_compile: compiling (not timed)")
        proc = subprocess.run(
            [sys.executable, "-m", "aotc.bench", "--prepare-aot", json.dumps({**spec, "artifact": artifact})],
            capture_output=True, text=True, env=dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(warm)),
        )
        if proc.returncode != 0:
            error = f"aot_compile failed: {_last_line(proc.stderr)}"
            return [_failed(name, spec, error) for name in names]
        extra = {"artifact": artifact}
        cold = _baseline(names[0], spec, dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(Path(tmp) / "cold-cache")),
                         on_variant, extra)
        return [cold, _baseline(names[1], spec, dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(warm)), on_variant, extra,
                                spec.get("repeats", 1))]


def _names(classes) -> list[str]:
    return [t if isinstance(t, str) else f"{t.__module__}:{t.__qualname__}" for t in classes]


def as_json(results: list[Result]) -> list[dict]:
    return [{**asdict(r), "spread": r.spread} for r in results]


if __name__ == "__main__":
    if sys.argv[1] == "--prepare-aot":
        _prepare_aot(json.loads(sys.argv[2]))
    else:
        _child(json.loads(sys.argv[1]))
