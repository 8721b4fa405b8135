"""`aotc bench`: a bundle's backends against the strongest baselines, side by side.

Every variant runs in fresh Python processes (`python -m aotc.tools.bench_child`), timed from
before the process starts to its first output (cold start), then for `iters` more calls
(steady state: median and p90); the child reports its peak RSS (CPU) or
`max_memory_allocated` (CUDA). With several processes per variant, the variants take turns
(round k runs every variant's k-th process), so that drift on a shared machine falls on
all of them alike. Before any figure counts, each variant's first call is compared with
eager's on the same inputs (aotc.tools.bench_check): one that differs is WRONG.

With `train`, a call is a whole step: forward, backward and an SGD step (for a joint
bundle that carries its optimizer, that optimizer: the baselines run torch.optim's with the
same hyperparameters). The variants:

- `aotc <backend>`: `aotc.load(bundle)`, the whole wrapper stack, on the golden inputs;
- `aoti raw runner`: the compiled package's own `run` on flat tensors gathered once, no
  aotc code per call: the floor the wrapper stack is measured against (training: the
  forward and backward packages and a foreach SGD update, no buffer updates);
- `eager` and `torch.compile` (cold, then warm inductor cache) on the model the user
  names with `model` (a bundle exported from a Hugging Face folder rebuilds it from its
  own hf/config.json and weights, aotc.tools.rebuild); for inference also `torch.compile
  freezing` (inductor's freezing, the baseline for `aotc compile --freeze`); for a training
  step also `eager foreach` and `eager fused` (torch.optim's faster implementations; CPU's
  default is the for-loop one) and `torch.compile whole step` (forward, backward and the
  optimizer's step under one torch.compile);
- `torch.compile dynamic` (asked for by name; `aotc bench --suite` does): `torch.compile
  freezing` with `dynamic=True`. Inductor's freezing prepacks a linear's weight for MKL's
  sgemm when its sizes are static, for oneDNN when they are symbolic (and always ahead of
  time, where MKL's packed weights cannot be saved). Which is faster depends on the CPU: on
  an AMD EPYC, MKL's takes 1.01x to 1.42x oneDNN's time at BERT's and Llama's sizes
  (benchmarks/text_codegen.md). Where the static choice is slower, this is the stronger
  torch.compile baseline;
- `aot_compile`: torch.compile's own ahead-of-time artifact
  (`torch.compile(model.forward, fullgraph=True).aot_compile(...)`, then
  `save_compiled_function`), made in a process of its own that is not timed, then loaded
  with `torch.compiler.load_compiled_function` (a pickle; the model's class must be
  importable) with an empty inductor cache (cold) and with the one compiling left (warm).
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from aotc.bundle.files import Bundle
from aotc.bundle.signing import configured_keys, require_signature
from aotc.errors import AotcError
from aotc.runtime.regional import RegionalBundle, is_regional
from aotc.sources.hf_folder import has_bundle_config
from aotc.tools.bench_child import FROZEN_DYNAMIC, WHOLE_STEP
from aotc.tools.bench_raw import RAW
from aotc.tools import bench_check
from aotc.tools.verify import _golden, artifacts

BASELINES = ("eager", "torch.compile", "torch.compile dynamic", "aot_compile", "raw")
# these rebuild the model from --model
MODEL_BASELINES = ("eager", "torch.compile", "torch.compile dynamic", "aot_compile")
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
    # its first call against eager's: "pass", "WRONG: ...", "unchecked: ...", or "eager" (the reference)
    check: str = ""

    @property
    def wrong(self) -> bool:
        return self.check.startswith("WRONG")

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


# ----------------------------------------------------------------- in the driver


def _last_line(err: str) -> str:
    return ([ln for ln in err.strip().splitlines() if ln.strip()][-1:] or ["no output"])[0]


def _run_once(variant: str, spec: dict, env: dict | None) -> Result:
    """Run one variant in a fresh process and collect its figures."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "aotc.tools.bench_child", json.dumps({**spec, "variant": variant})],
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

        raise AotcError(f"benchmark variant '{variant}' failed: {_last_line(err)}")
    median = figures["median_us"]
    return Result(variant, first, median, figures["p90_us"], spec["iters"], 1e6 / median if median else 0.0,
                  figures["peak_memory_mib"], note=AOT_NOTE if variant.startswith("aot_compile") else "")


def _failed(variant: str, spec: dict, error: str) -> Result:
    return Result(variant, None, None, None, spec["iters"], None, None, error=error)


def bench(path, backends=None, baselines=BASELINES, iters: int = 100, warmup: int = 10, device: str = "cpu",
          train: bool = False, threads: int = 1, on_variant=None, model: str | None = None,
          trusted_subclasses=(), repeats: int = 1, public_keys=None) -> list[Result]:
    """Benchmark every backend of the bundle (or `backends`) and the baselines; eager,
    torch.compile and aot_compile rebuild the model from `model` (a model file or
    pkg.mod:factory the caller names; a path recorded in the bundle is never imported).
    Each variant runs in `repeats` fresh processes (the cold-cache ones once: a second
    run would find the cache warm). `public_keys`: as for aotc.load; checked before the
    bundle is read, and again by each variant's process that loads it."""

    require_signature(path, public_keys)
    keys = [str(k) for k in configured_keys(public_keys)]  # the variants' processes ask for the same keys
    if is_regional(path):
        return _bench_regions(path, backends, baselines, iters, warmup, device, train, threads, on_variant, model,
                              trusted_subclasses, repeats, keys)
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
    # a bundle exported from a Hugging Face folder rebuilds its eager model from its own config
    _need_model(baselines, model or has_bundle_config(bundle))
    spec = {"bundle": str(bundle.path), "source": model, "device": device, "iters": iters, "warmup": warmup,
            "train": training, "threads": threads, "backend": None, "trusted": _names(trusted_subclasses),
            "repeats": repeats, "public_keys": keys}
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

        raise AotcError(
            f"the {' and '.join(rebuilding)} baseline(s) rebuild the model: name its file with --model "
            "(model=), or pass --baselines none to time the bundle alone. aotc never runs a model file "
            "a bundle names."
        )


def _bench_regions(path, backends, baselines, iters, warmup, device, train, threads, on_variant, model,
                   trusted_subclasses, repeats=1, public_keys=()) -> list[Result]:
    """A regional bundle: the model file's model with the regions applied (fx; aoti when
    every group is compiled) on its example inputs, against the baselines."""

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
            "regional": True, "trusted": _names(trusted_subclasses), "repeats": repeats, "public_keys": public_keys}
    return _run_variants(spec, [(f"aotc regions {b}", {"backend": b}) for b in available], baselines, on_variant)


@dataclass
class _Variant:
    """One row to time: its name, its child's spec and environment; a baseline's failure is
    a row, an aotc variant's an error; a cold-cache variant runs once (again it would find
    the cache warm)."""

    name: str
    spec: dict
    env: dict | None = None
    baseline: bool = False
    once: bool = False
    runs: list = field(default_factory=list)
    error: str = ""


def _run_variants(spec: dict, variants: list, baselines, on_variant) -> list[Result]:
    """aotc's `variants` and the baselines, each in fresh processes, interleaved: round k
    runs every variant's k-th process in turn (ABAB...), so that a machine's drift falls on
    all of them alike. torch.compile and aot_compile get a cold inductor cache of their own
    first, then the cache their first run (or the aot_compile preparation) left. Then each
    variant's first call is checked against eager's (bench_check)."""
    repeats = spec.get("repeats", 1)
    with tempfile.TemporaryDirectory() as tmp:
        plan = [_Variant(name, {**spec, **extra}) for name, extra in variants]
        if "eager" in baselines:  # a training step: also torch.optim's foreach and fused implementations
            plan += [_Variant(name, spec, baseline=True)
                     for name in ("eager", *(("eager foreach", "eager fused") if spec["train"] else ()))]
        # freezing folds weights that training would change: inference only; a training
        # step also compiles whole, forward, backward and the optimizer's step
        labels = () if "torch.compile" not in baselines else (
            ("torch.compile", WHOLE_STEP) if spec["train"] else ("torch.compile", "torch.compile freezing"))
        if "torch.compile dynamic" in baselines and not spec["train"]:
            labels += (FROZEN_DYNAMIC,)
        for label in labels:
            # no space in the path: inductor's compiler command lines would split it
            env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(Path(tmp) / label.replace(" ", "-")))
            plan += [_Variant(f"{label} (cold cache)", spec, env, baseline=True, once=True),
                     _Variant(f"{label} (warm cache)", spec, env, baseline=True)]
        if "aot_compile" in baselines and not spec.get("regional"):
            plan += _aot_compile_variants(spec, Path(tmp), on_variant)
        for k in range(repeats):
            for v in plan:
                if v.error or (v.once and k):
                    continue
                if on_variant:
                    on_variant(v.name + (f" (process {k + 1} of {repeats})" if repeats > 1 and not v.once else ""))
                check = {"check_path": str(Path(tmp) / f"check-{plan.index(v)}.safetensors")} if k == 0 else {}
                try:
                    v.runs.append(_run_once(v.name, {**v.spec, **check}, v.env))
                except AotcError as e:
                    if not v.baseline:
                        raise
                    v.error = str(e)
        return _checked(spec, plan, Path(tmp))


def _checked(spec: dict, plan: list[_Variant], tmp: Path) -> list[Result]:
    """Each variant's Result with its first call's verdict against eager's: the eager
    baseline's own record where it ran, else the bundle's reference."""
    records = {v.name: bench_check.load(tmp / f"check-{i}.safetensors") for i, v in enumerate(plan)
               if v.runs and (tmp / f"check-{i}.safetensors").exists()}
    tolerances, expected = {}, records.get("eager")
    if not spec.get("regional"):
        bundle = Bundle.open(spec["bundle"], verify_hashes=False)
        tolerances = bundle.manifest.tolerances
        if expected is None:
            expected = bench_check.from_reference(_golden(bundle), spec["train"])
    results = []
    for v in plan:
        if v.error or not v.runs:
            results.append(_failed(v.name, spec, v.error or "did not run"))
            continue
        check = "eager" if v.name == "eager" else bench_check.verdict(expected or {}, records.get(v.name, {}),
                                                                     tolerances)
        results.append(dataclasses.replace(_combine(v.runs), check=check))
    return results


def _aot_compile_variants(spec: dict, tmp: Path, on_variant) -> list[_Variant]:
    """aot_compile's artifact, made (untimed) in a process of its own, and its two rows:
    loaded with an empty inductor cache, and with the one compiling left."""
    names = ("aot_compile (cold cache)", "aot_compile (warm cache)")
    warm, artifact = tmp / "aot-warm-cache", str(tmp / "compiled.bin")
    if on_variant:
        on_variant("aot_compile: compiling (not timed)")
    proc = subprocess.run(
        [sys.executable, "-m", "aotc.tools.bench_child", "--prepare-aot", json.dumps({**spec, "artifact": artifact})],
        capture_output=True, text=True, env=dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(warm)),
    )
    extra = {**spec, "artifact": artifact}
    cold = _Variant(names[0], extra, dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp / "aot-cold-cache")),
                    baseline=True, once=True)
    rows = [cold, _Variant(names[1], extra, dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(warm)), baseline=True)]
    if proc.returncode != 0:
        for row in rows:
            row.error = f"aot_compile failed: {_last_line(proc.stderr)}"
    return rows


def _names(classes) -> list[str]:
    return [t if isinstance(t, str) else f"{t.__module__}:{t.__qualname__}" for t in classes]


def as_json(results: list[Result]) -> list[dict]:
    return [{**asdict(r), "spread": r.spread} for r in results]
