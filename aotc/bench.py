"""`aotc bench`: a bundle's backends against eager and torch.compile, side by side.

Every variant runs in a fresh Python process (`python -m aotc.bench`), timed from before
the process starts to its first output (cold start), then for `iters` more calls
(steady state: median and p90) on the bundle's golden inputs; the child reports its peak
RSS (CPU) or `max_memory_allocated` (CUDA). With `train`, a call is a whole step:
forward, backward and an SGD step. torch.compile runs twice: with an empty inductor
cache (cold) and with the cache the first run left (warm).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

BASELINES = ("eager", "torch.compile")


@dataclass(frozen=True)
class Result:
    """One variant's figures; times in seconds (cold start) and microseconds (per call)."""

    variant: str
    cold_start_s: float
    median_us: float
    p90_us: float
    iters: int
    calls_per_s: float
    peak_memory_mib: float


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


def _child(spec: dict) -> None:
    """Runs in the child process: build the variant, time it, print one JSON line."""
    import torch

    from aotc._torch_compat import pytree
    from aotc.bundle import Bundle
    from aotc.parity import _golden, _golden_inputs

    torch.set_num_threads(spec["threads"])
    regional = spec.get("regional", False)  # inputs and model from the model file; no golden inputs
    bundle = None if regional else Bundle.open(spec["bundle"], verify_hashes=False)
    from aotc.devices import resolve_device

    device = resolve_device(spec["device"])
    train = spec["train"]
    joint = not regional and "joint" in bundle.graph_kinds
    loss_fn = None
    if spec["variant"].startswith("aotc") and regional:
        import aotc
        from aotc.model_file import load_model

        model = aotc.apply(spec["bundle"], load_model(spec["source"]).module.to(device).train(train),
                           backend=spec["backend"], device=device, trusted_subclasses=spec["trusted"])
    elif spec["variant"].startswith("aotc"):
        import aotc

        model = aotc.load(bundle.path, backend=spec["backend"], device=device, mode="train" if train else "eval",
                          trusted_subclasses=spec["trusted"])
    else:
        from aotc.model_file import load_model

        loaded = load_model(spec["source"])
        model = loaded.module.to(device).train(train)
        loss_fn = loaded.loss
        if spec["variant"].startswith("torch.compile"):
            model = torch.compile(model)
    if train and loss_fn is None and spec["source"] and not joint:
        from aotc.model_file import load_model

        loss_fn = load_model(spec["source"]).loss
    if regional:
        from aotc.model_file import load_model

        example = load_model(spec["source"])
        inputs = (example.args, example.kwargs)
    else:
        inputs = _golden_inputs(bundle, _golden(bundle), spec["trusted"])
    args, kwargs = pytree.tree_map_only(torch.Tensor, lambda t: t.to(device), inputs)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3) if train else None

    def step():
        if not train:
            with torch.no_grad():
                return model(*args, **kwargs)
        if joint and spec["variant"].startswith("aotc"):
            loss = model.train_step(*args, **kwargs)
        else:
            out = model(*args, **kwargs)
            loss = loss_fn(out, *args, **kwargs) if loss_fn else sum(o.float().sum() for o in pytree.tree_leaves(out))
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss

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


def run_variant(variant: str, spec: dict, env: dict | None = None) -> Result:
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
        last = [ln for ln in err.strip().splitlines() if ln.strip()][-1:] or ["no output"]
        from aotc.errors import AotcError

        raise AotcError(f"benchmark variant '{variant}' failed: {last[0]}")
    median = figures["median_us"]
    return Result(variant, first, median, figures["p90_us"], spec["iters"], 1e6 / median if median else 0.0,
                  figures["peak_memory_mib"])


def bench(path, backends=None, baselines=BASELINES, iters: int = 100, warmup: int = 10, device: str = "cpu",
          train: bool = False, threads: int = 1, on_variant=None, model: str | None = None,
          trusted_subclasses=()) -> list[Result]:
    """Benchmark every backend of the bundle (or `backends`) and the baselines, which
    rebuild eager from `model` (a model file or pkg.mod:factory the caller names; a path
    recorded in the bundle is never imported)."""
    from aotc.bundle import Bundle
    from aotc.errors import AotcError
    from aotc.parity import artifacts

    from aotc.regions import is_regional

    if is_regional(path):
        return _bench_regions(path, backends, baselines, iters, warmup, device, train, threads, on_variant, model,
                              trusted_subclasses)
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
    training = train or bundle.metadata.training and "inference" not in bundle.graph_kinds
    source = model
    if baselines and not source:
        raise AotcError(
            f"the {' and '.join(baselines)} baseline(s) rebuild the model: name its file with --model "
            "(model=), or pass --baselines none to time the bundle alone. aotc never runs a model file "
            "a bundle names."
        )
    spec = {"bundle": str(bundle.path), "source": source, "device": device, "iters": iters, "warmup": warmup,
            "train": training, "threads": threads, "backend": None, "trusted": _names(trusted_subclasses)}
    return _run_variants(spec, [(f"aotc {label}", {"backend": backend}) for label, backend in available],
                         baselines, on_variant)


def _bench_regions(path, backends, baselines, iters, warmup, device, train, threads, on_variant, model,
                   trusted_subclasses) -> list[Result]:
    """A regional bundle: the model file's model with the regions applied (fx; aoti when
    every group is compiled) on its example inputs, against the baselines."""
    from aotc.errors import AotcError
    from aotc.regions import RegionalBundle

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
            "regional": True, "trusted": _names(trusted_subclasses)}
    return _run_variants(spec, [(f"aotc regions {b}", {"backend": b}) for b in available], baselines, on_variant)


def _run_variants(spec: dict, variants: list, baselines, on_variant) -> list[Result]:
    """Each of aotc's `variants`, then the baselines, in a fresh process each; torch.compile
    with a cold, then warm, inductor cache of its own."""
    variants = variants + ([("eager", {})] if "eager" in baselines else [])
    results = []
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
        if "torch.compile" in baselines:
            variants += [("torch.compile (cold cache)", {}), ("torch.compile (warm cache)", {})]
        for name, extra in variants:
            if on_variant:
                on_variant(name)
            results.append(run_variant(name, {**spec, **extra}, env if name.startswith("torch.compile") else None))
    return results


def _names(classes) -> list[str]:
    return [t if isinstance(t, str) else f"{t.__module__}:{t.__qualname__}" for t in classes]


def as_json(results: list[Result]) -> list[dict]:
    return [asdict(r) for r in results]


if __name__ == "__main__":
    _child(json.loads(sys.argv[1]))
