"""Training loaded bundles under torch.distributed: DDP and FSDP2 on two gloo ranks.

One spawn of two CPU processes (gloo, loopback only) runs every configuration in turn:
eager DDP, aotc fx DDP, aotc aoti DDP, eager FSDP2 (`fully_shard`), aotc fx FSDP2 and
aotc aoti FSDP2, each five SGD-with-momentum steps of sample_models/mlp.py (BatchNorm
updates its buffers) on data that differs per rank. The forward+backward bundle is
compiled once, here; the ranks only load it, and every tracing and compiling entry
point raises on them while aotc runs. Then, on the same group, a joint bundle's
train_step must be refused with DistributedError (its gradients would bypass DDP's
hooks and FSDP2's sharding). Ranks write what they trained to files; this process
compares every loss, parameter and buffer of aotc with eager's on the same rank: fx
exactly (torch.equal), aoti within AOTI_TOL.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch

import aotc

SAMPLE = Path(__file__).resolve().parent.parent / "sample_models" / "mlp.py"
WORLD = 2
STEPS = 5
CONFIGS = [(wrapper, backend) for wrapper in ("ddp", "fsdp2") for backend in ("eager", "fx", "aoti")]
# A hung collective fails the test instead of the run; gloo's own timeout (COLLECTIVE_TIMEOUT)
# turns it into an error on the ranks first.
TIMEOUT_S = 180
COLLECTIVE_TIMEOUT = timedelta(seconds=60)
# fx runs eager's own kernels, in eager's order: bitwise equal. AOTInductor fuses
# BatchNorm's reductions and the backward's sums and rounds differently: after five steps
# the largest difference seen is 1.8e-7 absolute (running_var, ~2 ulps), 6e-6 relative on
# running_mean entries near zero: rounding, with room to spare for other CPUs' kernels, and
# 100x tighter than test_runtime_training's aoti tolerance.
AOTI_TOL = dict(rtol=1e-5, atol=1e-6)


def _batch(rank: int, step: int) -> torch.Tensor:
    """Each rank's own data: gradients differ per rank, so only a real all-reduce makes
    the ranks agree."""
    return torch.randn(8, 16, generator=torch.Generator().manual_seed(1000 * rank + step))


def _optimizer(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def _train(model, module, rank: int, loss_fn) -> dict:
    """STEPS optimizer steps of `model` (module, or its DDP wrapper) on `rank`'s data;
    the losses and the whole parameters (gathered when sharded) and buffers afterwards."""
    from torch.distributed.tensor import DTensor

    opt = _optimizer(model.parameters())
    losses = []
    for step in range(STEPS):
        x = _batch(rank, step)
        loss = loss_fn(model(x), x)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().clone())
    params = {
        name: (p.full_tensor() if isinstance(p, DTensor) else p).detach().clone()
        for name, p in module.named_parameters()
    }
    buffers = {name: b.detach().clone() for name, b in module.named_buffers()}
    return {"losses": torch.stack(losses), "params": params, "buffers": buffers}


@contextlib.contextmanager
def _nothing_traced():
    """Every tracing and compiling entry point raises while a rank runs aotc: a bundle is
    compiled once and only loaded on the ranks."""
    import torch._functorch.aot_autograd
    import torch._inductor
    import torch._inductor.compile_fx

    entry_points = [
        (torch.export, "export"),
        (torch._inductor, "aoti_compile_and_package"),
        (torch._inductor.compile_fx, "compile_fx"),
        (torch._functorch.aot_autograd, "aot_export_joint_with_descriptors"),
        (torch, "compile"),
    ]
    saved = [(owner, name, getattr(owner, name)) for owner, name in entry_points]

    def refuse(qualname):
        def refused(*args, **kwargs):
            raise AssertionError(f"{qualname} was called on a rank: ranks must only load the bundle")

        return refused

    for owner, name, _ in saved:
        setattr(owner, name, refuse(f"{owner.__name__}.{name}"))
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


def _dynamo_captures() -> int:
    """Frames Dynamo has looked at and calls it put in graphs; non-zero once it traced."""
    from torch._dynamo.utils import counters

    return counters["frames"]["total"] + counters["stats"]["calls_captured"] + counters["stats"]["unique_graphs"]


def _joint_refusals(joint_bundle: str, rank: int) -> dict:
    """What train_step of a joint bundle does on this group, plain (DDP's setting) and
    with its parameters sharded by fully_shard: the error, and whether any .grad was set."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    out = {}
    joint = aotc.load(joint_bundle, mode="train", backend="fx")
    for setting in ("ddp", "fsdp2"):
        if setting == "fsdp2":
            fully_shard(joint, mesh=init_device_mesh("cpu", (WORLD,)))
        try:
            joint.train_step(_batch(rank, 0))
            error = None
        except Exception as e:  # noqa: BLE001 - the parent asserts which
            error = f"{type(e).__name__}: {e}"
        out[setting] = {"error": error, "grads_set": any(p.grad is not None for p in joint.parameters())}
    return out


def _rank_main(rank: int, port: int, autograd_bundle: str, joint_bundle: str, out_dir: str) -> None:
    """One rank: every configuration of CONFIGS, then the joint refusals; results to out_dir."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.nn.parallel import DistributedDataParallel

    from aotc.sources.model_file import load_model

    # Two ranks on two cores: one thread each, or they fight over the cores.
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    dist.init_process_group("gloo", rank=rank, world_size=WORLD, timeout=COLLECTIVE_TIMEOUT)
    try:
        results = {}
        for wrapper, backend in CONFIGS:
            spec = load_model(str(SAMPLE))
            with _nothing_traced() if backend != "eager" else contextlib.nullcontext():
                before = _dynamo_captures()
                if backend == "eager":
                    module = spec.module.train()
                else:
                    module = aotc.load(autograd_bundle, mode="train", backend=backend)
                    assert module.backend == backend
                if wrapper == "ddp":
                    model = DistributedDataParallel(module)
                else:
                    fully_shard(module, mesh=init_device_mesh("cpu", (WORLD,)))
                    model = module
                result = _train(model, module, rank, spec.loss)
                result["dynamo_captures"] = _dynamo_captures() - before
            results[f"{wrapper}/{backend}"] = result
        with _nothing_traced():
            results["joint"] = _joint_refusals(joint_bundle, rank)
        torch.save(results, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_ranks(*args) -> None:
    """Spawn WORLD ranks of _rank_main(rank, *args); fail if one raises or they outlive TIMEOUT_S."""
    import torch.multiprocessing as mp

    context = mp.start_processes(_rank_main, args=args, nprocs=WORLD, join=False, start_method="spawn")
    deadline = time.monotonic() + TIMEOUT_S
    try:
        # join raises ProcessRaisedException (with the rank's traceback) when a rank fails
        while not context.join(timeout=max(0.0, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                pytest.fail(f"the {WORLD} ranks were still running after {TIMEOUT_S} s (a hung collective?)")
    finally:
        for process in context.processes:
            if process.is_alive():
                process.kill()
                process.join(10)


def _single_process(data_rank: int) -> dict:
    """Eager training on one rank's data alone, no process group: what a rank would end
    with if DDP/FSDP2 silently did not synchronize."""
    from aotc.sources.model_file import load_model

    spec = load_model(str(SAMPLE))
    model = spec.module.train()
    opt = _optimizer(model.parameters())
    for step in range(STEPS):
        x = _batch(data_rank, step)
        spec.loss(model(x), x).backward()
        opt.step()
        opt.zero_grad()
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def _assert_same(actual: dict, expected: dict, what: str, tol: dict | None = None) -> None:
    """Equal tensors under the same names: bitwise, or within `tol` (assert_close)."""
    assert actual.keys() == expected.keys(), what
    for name, value in expected.items():
        if tol is not None:
            torch.testing.assert_close(actual[name], value, **tol, msg=lambda m: f"{what}, {name}: {m}")
        else:
            assert torch.equal(actual[name], value), (
                f"{what}, {name}: max abs difference {(actual[name].double() - value.double()).abs().max().item():.3g}"
            )


@pytest.mark.slow
def test_ddp_and_fsdp2_train_like_eager_and_joint_is_refused(sample_bundles, tmp_path):
    # A copy: compiling the session's own bundle would switch other tests' backend="auto" to aoti.
    autograd_bundle = tmp_path / "mlp-autograd"
    shutil.copytree(sample_bundles[("mlp", "autograd")][0], autograd_bundle)
    aotc.compile(autograd_bundle)  # once, before any rank starts (a cache hit after the first run)
    joint_bundle = sample_bundles[("mlp", "joint")][0]

    _run_ranks(_free_port(), str(autograd_bundle), str(joint_bundle), str(tmp_path))
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(WORLD)]
    alone = _single_process(data_rank=0)

    for wrapper in ("ddp", "fsdp2"):
        eager = [ranks[r][f"{wrapper}/eager"] for r in range(WORLD)]
        # Synchronized: both ranks hold the same parameters, which rank 0's data alone
        # would not have given (for FSDP2 the gathered whole tensors).
        _assert_same(eager[1]["params"], eager[0]["params"], f"eager {wrapper}: rank 1 vs rank 0")
        # not fc1.bias: in front of train-mode BatchNorm its true gradient is 0 (rounding noise)
        for name in ("fc1.weight", "bn.weight", "bn.bias", "fc2.weight", "fc2.bias"):
            assert not torch.allclose(eager[0]["params"][name], alone[name], rtol=1e-3, atol=1e-5), (
                f"eager {wrapper}: {name} equals single-process training on rank 0's data: no gradient sync"
            )
        # aotc equals eager on each rank (BatchNorm's buffers are per rank: DDP broadcasts
        # rank 0's before each forward, FSDP2 leaves them alone).
        for backend, tol in (("fx", None), ("aoti", AOTI_TOL)):
            for r in range(WORLD):
                got, want = ranks[r][f"{wrapper}/{backend}"], eager[r]
                what = f"{backend} {wrapper}, rank {r}"
                _assert_same({"losses": got["losses"]}, {"losses": want["losses"]}, what, tol)
                _assert_same(got["params"], want["params"], f"{what}, parameters", tol)
                _assert_same(got["buffers"], want["buffers"], f"{what}, buffers", tol)
                assert got["dynamo_captures"] == 0, f"{what}: Dynamo traced on a rank"

    for r in range(WORLD):
        refused = ranks[r]["joint"]
        for setting in ("ddp", "fsdp2"):
            assert refused[setting]["error"] is not None, f"rank {r}: joint train_step ran under {setting}"
            assert not refused[setting]["grads_set"], f"rank {r}: refused train_step under {setting} set .grad"
        ddp, fsdp2 = refused["ddp"]["error"], refused["fsdp2"]["error"]
        assert ddp.startswith(f"DistributedError: train_step of joint bundle '{joint_bundle}' would not synchronize "
                              "gradients across the 2 processes of torch.distributed"), ddp
        assert "DistributedDataParallel's autograd hooks never see them" in ddp, ddp
        assert fsdp2.startswith(f"DistributedError: train_step of joint bundle '{joint_bundle}' cannot run on "
                                "sharded parameters: 'fc1.weight' is a DTensor (FSDP2's fully_shard)"), fsdp2
        for message in (ddp, fsdp2):
            assert "aotc export MODEL --autograd" in message and "fully_shard" in message, message
