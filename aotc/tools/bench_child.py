"""`aotc bench`'s child process (`python -m aotc.tools.bench_child SPEC`): builds one variant
(aotc's loaded bundle, eager, torch.compile, an aot_compile artifact or the raw runner),
times it and prints "FIRST" after the first call, then one JSON line of figures.
`python -m aotc.tools.bench_child --prepare-aot SPEC` makes the aot_compile artifact, untimed.

A variant's cold start is timed from before this process starts, imports included, so each
variant imports only what it runs: the imports are inside the functions on purpose (eager
does not pay for aotc's runtime, nor the raw runner for the model's source).
"""

from __future__ import annotations

import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

from aotc.tools.bench_raw import RAW

WHOLE_STEP = "torch.compile whole step"
FROZEN_DYNAMIC = "torch.compile freezing dynamic"  # freezing with dynamic=True (bench.py says why)
# the training baselines' torch.optim implementations: eager's plain row is CPU's default
OPTIMIZER_IMPL = {"eager foreach": {"foreach": True}, "eager fused": {"fused": True}}


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


def _inputs(spec: dict, device):
    """(args, kwargs) on `device`: the bundle's golden inputs, or a regional bundle's
    model file's example inputs."""
    import torch

    from aotc._torch_compat import pytree

    if spec.get("regional"):
        from aotc.sources.model_file import load_model

        example = load_model(spec["source"])
        inputs = (example.args, example.kwargs)
    else:
        from aotc.bundle.files import Bundle
        from aotc.tools.verify import _golden, _golden_inputs

        from aotc.contract.call_inputs import unwrap

        bundle = Bundle.open(spec["bundle"], verify_hashes=False)
        inputs = unwrap(_golden_inputs(bundle, _golden(bundle), spec["trusted"]))  # constants as the user passes them
    return pytree.tree_map_only(torch.Tensor, lambda t: t.to(device), inputs)


def _eager(spec: dict):
    """The eager model and its loss (None: the outputs' sum): built by the model file the
    user named, or for a bundle exported from a Hugging Face folder, rebuilt from its own
    hf/config.json and weights with transformers' classes."""
    if spec["source"]:
        from aotc.sources.model_file import load_model

        loaded = load_model(spec["source"])
        return loaded.module, loaded.training_loss()
    from aotc.bundle.files import Bundle
    from aotc.tools.rebuild import eager_from_bundle

    return eager_from_bundle(Bundle.open(spec["bundle"], verify_hashes=False)), None


def _model_step(spec: dict, device):
    """A step over a model: aotc's loaded bundle, eager, torch.compile or an aot_compile
    artifact; returns step()."""
    import torch

    from aotc._torch_compat import pytree
    from aotc.contract.loss_inputs import model_args

    variant, train = spec["variant"], spec["train"]
    regional = spec.get("regional", False)
    joint = False
    loss_fn = None
    if variant.startswith("aotc"):
        import aotc

        if regional:
            from aotc.sources.model_file import load_model

            model = aotc.apply(spec["bundle"], load_model(spec["source"]).module.to(device).train(train),
                               backend=spec["backend"], device=device, trusted_subclasses=spec["trusted"],
                               public_keys=spec["public_keys"])
        else:
            model = aotc.load(spec["bundle"], backend=spec["backend"], device=device,
                              mode="train" if train else "eval", trusted_subclasses=spec["trusted"],
                              public_keys=spec["public_keys"])
            joint = "joint" in model._programs
        call = model
        if train and not joint and spec["source"]:
            from aotc.sources.model_file import load_model

            loss_fn = load_model(spec["source"]).training_loss()
    else:
        model, loss_fn = _eager(spec)
        model = model.to(device).train(train)
        call = model
        if variant.startswith("torch.compile"):
            from aotc import _torch_compat as tc

            tc.inductor_random_as_eager()  # dropout draws eager's masks, as in aotc's packages: checkable
        if variant.startswith("torch.compile freezing"):  # weights folded in, as `aotc compile --freeze`
            tc.inductor_freezing_on()  # a process of its own: nothing else compiles here
            call = torch.compile(model, dynamic=True if variant.startswith(FROZEN_DYNAMIC) else None)
        elif variant.startswith("torch.compile") and not variant.startswith(WHOLE_STEP):
            call = torch.compile(model)
        elif variant.startswith("aot_compile"):
            with open(spec["artifact"], "rb") as f:
                compiled = torch.compiler.load_compiled_function(f)

            def call(*a, **k):
                return compiled(model, *a, **k)
    args, kwargs = _inputs(spec, device)
    optimizer = None
    if train and not (joint and model.optimizer is not None):
        optimizer = _optimizer(spec, model, OPTIMIZER_IMPL.get(variant.split(" (")[0], {}))

    def step():
        if not train:
            with torch.no_grad():
                return call(*args, **kwargs)
        if joint:
            loss = model.train_step(*args, **kwargs)
            if optimizer is None:  # the bundle's graph ran the optimizer
                return loss
        else:
            out = call(*model_args(loss_fn, args), **kwargs)  # a loss may read inputs of its own
            loss = loss_fn(out, *args, **kwargs) if loss_fn else sum(o.float().sum() for o in pytree.tree_leaves(out))
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        return loss

    if variant.startswith(WHOLE_STEP):  # forward, backward and the optimizer's step under one torch.compile
        return torch.compile(step)
    return step


def _optimizer(spec: dict, model, impl: dict):
    """The optimizer a training step runs: the one a joint bundle carries (for the
    baselines, torch.optim's own with its hyperparameters), else SGD with lr 1e-3; `impl`
    picks torch.optim's implementation (CPU's default is the for-loop one)."""
    import torch

    from aotc.bundle.files import Bundle

    info = None if spec.get("regional") else Bundle.open(spec["bundle"], verify_hashes=False).metadata.optimizer
    if info is None:
        return torch.optim.SGD(model.parameters(), lr=1e-3, **impl)
    from aotc.contract import optimizers

    optimizer = optimizers.build(info, model, optimizers.initial_state(info, None, model))
    for group in optimizer.param_groups:  # as if passed to the constructor: step() reads them from here
        group.update(impl)
    return optimizer


def _child(spec: dict) -> None:
    """Runs in the child process: build the variant, time it, print one JSON line."""
    import torch

    from aotc.devices import resolve_device

    torch.set_num_threads(spec["threads"])
    device = resolve_device(spec["device"])
    if device.type == "cpu":  # every variant with the heap aotc's runtime keeps (aotc.runtime.heap), eager too
        from aotc.runtime import heap

        heap.keep()
    from aotc.tools.bench_raw import raw_step

    raw = spec["variant"] == RAW
    step = raw_step(spec, device) if raw else _model_step(spec, device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    torch.manual_seed(0)  # every variant's first call draws what eager's draws (dropout)
    first = step()
    sync()
    print("FIRST", flush=True)
    if spec.get("check_path"):  # what the driver compares with eager's before the figures count
        _save_check(spec, first, raw)
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


def _save_check(spec: dict, first, raw: bool) -> None:
    from aotc.tools import bench_check

    if raw:
        from aotc.bundle.files import Bundle
        from aotc.tools.bench_raw import raw_kind

        bundle = Bundle.open(spec["bundle"], verify_hashes=False)
        found = bench_check.raw_record(bundle, raw_kind(bundle, spec["train"]), first, spec["train"])
    else:
        found = bench_check.record(first, spec["train"])
    bench_check.save(found, spec["check_path"])


def _prepare_aot(spec: dict) -> None:
    """Runs in a process of its own: aot_compile the model on the bundle's inputs and save it."""
    import torch

    from aotc.devices import resolve_device

    torch.set_num_threads(spec["threads"])
    device = resolve_device(spec["device"])
    model = _eager(spec)[0].to(device).train(spec["train"])
    args, kwargs = _inputs(spec, device)
    with torch.no_grad() if not spec["train"] else contextlib.nullcontext():
        compiled = torch.compile(model.forward, fullgraph=True).aot_compile((args, kwargs))
    compiled.save_compiled_function(spec["artifact"])


if __name__ == "__main__":
    if sys.argv[1] == "--prepare-aot":
        _prepare_aot(json.loads(sys.argv[2]))
    else:
        _child(json.loads(sys.argv[1]))
