"""A joint bundle that carries its optimizer: `train_step` runs loss, gradients and the
SGD or AdamW update in one graph. Ten steps, with a scheduler changing the learning rate
between them, must equal eager `loss.backward(); opt.step(); opt.zero_grad()` on fx and
aoti; the optimizer's state travels with the bundle; what aotc cannot replay is refused
by name."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from torch import nn

import aotc
from aotc.errors import AotcError, GraphRunError, ModeError
from conftest import SAMPLES, invoke

OPTIMIZERS = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-2, nesterov=True),
    "adamw": lambda params: torch.optim.AdamW(params, lr=1e-2, betas=(0.8, 0.99), weight_decay=0.1),
}


class TinyNet(nn.Module):
    # no BatchNorm before a bias: its gradient would be zero up to rounding, which Adam
    # scales up to a full step whose sign is the rounding's (in eager too)
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.norm = nn.LayerNorm(16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x, target):  # the target is for the loss: loss(outputs, *inputs)
        return self.fc2(torch.nn.functional.gelu(self.norm(self.fc1(x))))


def mse(out, x, target):
    return torch.nn.functional.mse_loss(out, target)


def batch(seed: int):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(6, 8, generator=g), torch.randn(6, 4, generator=g)


def new_model() -> TinyNet:
    torch.manual_seed(0)
    return TinyNet()


@pytest.fixture(scope="module")
def fused_bundles(tmp_path_factory):
    """One bundle per optimizer, compiled for aoti (two small AOTInductor compiles)."""
    out = {}
    for name, make in OPTIMIZERS.items():
        model = new_model()
        path = tmp_path_factory.mktemp("fused") / name
        aotc.export(model, batch(0), path, graphs=("joint",), loss=mse, optimizer=make(model.parameters()))
        aotc.compile(path)
        out[name] = path
    return out


def eager_steps(model, opt, sched, steps: range) -> list[float]:
    losses = []
    for i in steps:
        x, target = batch(i)
        loss = mse(model(x, target), x, target)
        loss.backward()
        opt.step()
        opt.zero_grad()
        sched.step()
        losses.append(loss.item())
    return losses


def bundle_steps(step, sched, steps: range) -> list[float]:
    losses = []
    for i in steps:
        losses.append(step.train_step(*batch(i)).item())
        sched.step()
    return losses


def assert_same_training(step, eager, eager_opt) -> None:
    for (name, p), (_, q) in zip(step.named_parameters(), eager.named_parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)
        assert p.grad is None, f"{name}: eager's zero_grad() leaves no .grad"
    ours, theirs = step.optimizer.state_dict(), eager_opt.state_dict()
    assert ours["param_groups"][0]["lr"] == theirs["param_groups"][0]["lr"]
    for k, state in theirs["state"].items():
        assert state.keys() == ours["state"][k].keys()
        for key, value in state.items():
            torch.testing.assert_close(ours["state"][k][key], value, rtol=1e-4, atol=1e-5, msg=f"{k}/{key}")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["fx", "aoti"])
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_ten_steps_equal_eager_with_a_scheduler(fused_bundles, name, backend):
    step = aotc.load(fused_bundles[name], mode="train", backend=backend)
    eager = new_model()
    opt = OPTIMIZERS[name](eager.parameters())
    ours = bundle_steps(step, torch.optim.lr_scheduler.StepLR(step.optimizer, 3, 0.5), range(10))
    theirs = eager_steps(eager, opt, torch.optim.lr_scheduler.StepLR(opt, 3, 0.5), range(10))
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-6)
    assert step.optimizer.param_groups[0]["lr"] == pytest.approx(0.1 * 0.5 ** 3 if name == "sgd" else 1e-2 * 0.5 ** 3)
    assert_same_training(step, eager, opt)


@pytest.mark.slow
def test_state_saves_and_loads_with_the_bundle(tmp_path, fused_bundles):
    # an optimizer that already took steps: its state is exported with it
    eager = new_model()
    opt = OPTIMIZERS["adamw"](eager.parameters())
    sched = torch.optim.lr_scheduler.StepLR(opt, 100)
    eager_steps(eager, opt, sched, range(3))
    aotc.export(eager, batch(0), tmp_path / "b", graphs=("joint",), loss=mse, optimizer=opt)
    step = aotc.load(tmp_path / "b", mode="train", backend="fx")
    assert_same_training(step, eager, opt)
    assert float(step.optimizer.state_dict()["state"][0]["step"]) == 3.0

    # torch.optim's state_dict() and load_state_dict() move the state between runs
    saved = copy.deepcopy(step.optimizer.state_dict())
    bundle_steps(step, torch.optim.lr_scheduler.StepLR(step.optimizer, 100), range(3, 5))
    again = aotc.load(tmp_path / "b", mode="train", backend="fx")  # the parameters as `saved` was taken
    again.optimizer.load_state_dict(saved)
    bundle_steps(again, torch.optim.lr_scheduler.StepLR(again.optimizer, 100), range(3, 5))
    assert_same_training(again, step, step.optimizer)


REFUSALS = [
    ("Adam, not AdamW", lambda m: torch.optim.Adam(m.parameters()), "torch.optim.adam.Adam is not supported"),
    ("RMSprop", lambda m: torch.optim.RMSprop(m.parameters()), "RMSprop is not supported"),
    ("SGD dampening", lambda m: torch.optim.SGD(m.parameters(), momentum=0.9, dampening=0.1), r"dampening=0.1"),
    ("AdamW amsgrad", lambda m: torch.optim.AdamW(m.parameters(), amsgrad=True), "amsgrad=True"),
    ("two groups", lambda m: torch.optim.SGD([{"params": m.fc1.parameters()}, {"params": m.fc2.parameters()}]),
     "2 parameter groups"),
    ("a parameter left out", lambda m: torch.optim.SGD(list(m.fc1.parameters()) + list(m.fc2.parameters())),
     "does not update norm.weight, norm.bias"),
    ("another model's parameters", lambda m: torch.optim.SGD(nn.Linear(2, 2).parameters()),
     "are not parameters of TinyNet"),
]


@pytest.mark.parametrize("what,make,message", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_optimizers_aotc_cannot_replay_are_refused_by_name(tmp_path, what, make, message):
    model = new_model()
    with pytest.raises(AotcError, match=message) as caught:
        aotc.export(model, batch(0), tmp_path / "b", graphs=("joint",), loss=mse, optimizer=make(model))
    assert "Supported: torch.optim.SGD" in str(caught.value)
    assert not (tmp_path / "b").exists()


def test_optimizer_needs_a_joint_graph(tmp_path):
    model = new_model()
    with pytest.raises(AotcError, match="optimizer= needs a joint graph"):
        aotc.export(model, batch(0), tmp_path / "b", graphs=("forward", "backward"), loss=mse,
                    optimizer=torch.optim.SGD(model.parameters()))


@pytest.mark.slow
def test_a_setting_that_changes_the_graph_is_refused_at_the_step(fused_bundles):
    step = aotc.load(fused_bundles["sgd"], mode="train", backend="fx")
    before = [p.detach().clone() for p in step.parameters()]
    step.optimizer.param_groups[0]["nesterov"] = False
    with pytest.raises(ModeError, match="nesterov changed since export"):
        step.train_step(*batch(0))
    step.optimizer.param_groups[0].update(nesterov=True, momentum=0.0)
    with pytest.raises(ModeError, match=r"momentum \(zero or not\) changed"):
        step.train_step(*batch(0))
    assert all(torch.equal(a, b) for a, b in zip(before, step.parameters())), "a refused step changes nothing"


@pytest.mark.slow
def test_cli_exports_inspects_and_verifies_a_fused_step(tmp_path):
    out = tmp_path / "mlp"
    result = invoke("export", SAMPLES / "mlp.py", "--joint", "--optimizer", "sgd", "--lr", "0.05", "--momentum",
                    "0.9", "--nesterov", "--weight-decay", "1e-4", "-o", out, "--json")
    assert result.exit_code == 0, result.stderr
    meta = json.loads((out / "metadata.json").read_text())["optimizer"]
    assert meta["name"] == "sgd" and meta["options"] == {"nesterov": True, "maximize": False}
    assert meta["hyperparameters"] == {"lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4}
    shown = " ".join(invoke("inspect", out).stderr.split())
    assert "optimizer sgd (lr 0.05, momentum 0.9, weight_decay 0.0001, nesterov) in the joint graph" in shown
    verified = invoke("verify", out, "--model", SAMPLES / "mlp.py", "--json")
    assert verified.exit_code == 0, verified.stdout + verified.stderr
    checked = {c["name"] for c in json.loads(verified.stdout)["checks"]}
    assert {"param:fc1.weight", "optimizer:fc1.weight/momentum_buffer", "loss"} <= checked

    bad = invoke("export", SAMPLES / "mlp.py", "--optimizer", "adamw", "-o", tmp_path / "x")
    assert bad.exit_code != 0 and "--optimizer needs --joint" in bad.stderr
    bad = invoke("export", SAMPLES / "mlp.py", "--joint", "--optimizer", "adamw", "--momentum", "0.9", "-o",
                 tmp_path / "x")
    assert bad.exit_code != 0 and "--optimizer adamw takes no --momentum" in bad.stderr


@pytest.mark.slow
def test_bench_times_the_fused_step_and_its_raw_runner(fused_bundles):
    result = invoke("bench", fused_bundles["adamw"], "--iters", "3", "--warmup", "1", "--baselines", "raw",
                    "--backend", "aoti", "--json")
    assert result.exit_code == 0, result.stderr
    rows = {r["variant"]: r for r in json.loads(result.stdout)["results"]}
    assert set(rows) == {"aotc joint+adamw aoti/cpu", "aoti raw runner"}
    assert all(r["median_us"] > 0 for r in rows.values())


def test_a_parameter_the_loss_does_not_reach_is_left_alone(tmp_path):
    # eager's optimizer skips a parameter whose .grad is None: no weight decay, no momentum
    model = new_model()
    model.unused = nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.1)
    aotc.export(model, batch(0), tmp_path / "b", graphs=("joint",), loss=mse, optimizer=opt)
    step = aotc.load(tmp_path / "b", mode="train", backend="fx")
    before = step.unused.weight.detach().clone()
    eager = copy.deepcopy(model)
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9, weight_decay=0.1)
    eager_steps(eager, eager_opt, torch.optim.lr_scheduler.StepLR(eager_opt, 100), range(3))
    bundle_steps(step, torch.optim.lr_scheduler.StepLR(step.optimizer, 100), range(3))
    assert torch.equal(step.unused.weight, before) and torch.equal(eager.unused.weight, before)
    for (name, p), (_, q) in zip(step.named_parameters(), eager.named_parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)


def test_state_that_does_not_fit_the_graph_is_refused(fused_bundles):
    # torch.optim's load_state_dict does not check state shapes; the compiled graph would
    # read such a tensor blind
    step = aotc.load(fused_bundles["adamw"], mode="train", backend="fx")
    saved = step.optimizer.state_dict()
    saved["state"][0]["exp_avg"] = torch.zeros(3)
    step.optimizer.load_state_dict(saved)
    with pytest.raises(ModeError, match=r"'exp_avg' state of a parameter shaped \(16, 8\) is a torch.float32 \(3,\)"):
        step.train_step(*batch(0))


def test_a_replaced_parameter_is_refused_not_left_untrained(fused_bundles):
    # the graph would read the new Parameter while the update went to the one the optimizer holds
    step = aotc.load(fused_bundles["sgd"], mode="train", backend="fx")
    step.fc1.weight = nn.Parameter(torch.zeros_like(step.fc1.weight))
    with pytest.raises(ModeError, match="a parameter of this joint bundle was replaced after load"):
        step.train_step(*batch(0))
    # new values copied in place are what train_step trains
    fresh = aotc.load(fused_bundles["sgd"], mode="train", backend="fx")
    fresh.load_state_dict(new_model().state_dict())
    fresh.train_step(*batch(0))


@pytest.mark.slow
def test_the_compiled_step_updates_in_place(fused_bundles):
    """The aoti package writes the new parameters and optimizer state into the tensors it
    is given (exporters/aoti_updates.py): the same memory, version counters bumped as an
    eager step bumps them, the values of the fx replay; a state_dict loaded afterwards is
    what the next step reads and updates."""
    from aotc.bundle.files import Bundle

    build = Bundle.open(fused_bundles["adamw"]).manifest.file("compiled/cpu/joint.pt2").build
    assert build["updates"] == "in_place"
    shown = " ".join(invoke("inspect", fused_bundles["adamw"]).stderr.split())
    assert "compiled/cpu/joint.pt2: writes the new parameters, optimizer state and buffers into their own memory" in shown
    compiled = aotc.load(fused_bundles["adamw"], mode="train", backend="aoti")
    replay = aotc.load(fused_bundles["adamw"], mode="train", backend="fx")
    before = {n: (p.data_ptr(), p._version) for n, p in compiled.named_parameters()}
    states = [s["exp_avg"] for s in compiled.optimizer.state.values()]
    pointers = [s.data_ptr() for s in states]
    for i in range(2):
        compiled.train_step(*batch(i))
        replay.train_step(*batch(i))
    for (name, p), (_, q) in zip(compiled.named_parameters(), replay.named_parameters(), strict=True):
        assert p.data_ptr() == before[name][0], f"{name} was given new memory"
        assert p._version >= before[name][1] + 2, f"{name}: its version counter did not move"
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)
    assert [s["exp_avg"].data_ptr() for s in compiled.optimizer.state.values()] == pointers
    assert all(s.abs().sum() > 0 for s in states)
    # new state tensors (a copy: torch.optim's load_state_dict keeps the tensors it is given)
    compiled.optimizer.load_state_dict(copy.deepcopy(replay.optimizer.state_dict()))
    compiled.load_state_dict(replay.state_dict())
    compiled.train_step(*batch(5))
    replay.train_step(*batch(5))
    for (name, p), (_, q) in zip(compiled.named_parameters(), replay.named_parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.slow
def test_loading_a_cpu_package_keeps_the_heap(fused_bundles):
    """A compiled step's buffers stay in the process between steps (aotc.runtime.heap): set
    by the first CPU package a process loads, not before."""
    import subprocess
    import sys

    from aotc.runtime import heap

    if not heap._glibc_version():
        pytest.skip("mallopt's thresholds are glibc's")
    script = ("import sys, aotc; from aotc.runtime import heap; before = heap._state; "
              "aotc.load(sys.argv[1], mode='train', backend='aoti'); print(before, heap._state)")
    proc = subprocess.run([sys.executable, "-c", script, str(fused_bundles["adamw"])], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["None", "kept"]


@pytest.mark.slow
def test_inputs_that_share_memory_with_an_updated_one_are_refused(fused_bundles):
    # the compiled step writes parameters in place, assuming no other input reads that memory
    step = aotc.load(fused_bundles["sgd"], mode="train", backend="aoti")
    with torch.no_grad():
        step.fc1.bias.data = step.fc2.weight.data.view(-1)[:16]
    with pytest.raises(GraphRunError, match=r"share memory and the compiled step updates one of them in place"):
        step.train_step(*batch(0))


class TiedNet(nn.Module):
    # one weight for the embedding and the output layer, as GPT-2's: the joint graph takes it twice
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(16, 8)
        self.norm = nn.LayerNorm(8)
        self.out = nn.Linear(8, 16, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, tokens):
        return self.out(self.norm(self.embed(tokens)))


@pytest.mark.slow
def test_a_tied_parameter_is_updated_by_copy_and_matches_eager(tmp_path):
    def loss(logits, tokens):
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten())

    torch.manual_seed(0)
    model = TiedNet()
    tokens = torch.randint(0, 16, (4, 6))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    aotc.export(model, (tokens,), tmp_path / "b", graphs=("joint",), loss=loss, optimizer=opt)
    aotc.compile(tmp_path / "b")
    step = aotc.load(tmp_path / "b", mode="train", backend="aoti")
    eager = copy.deepcopy(model)
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.1, momentum=0.9)
    for _ in range(3):
        step.train_step(tokens)
        loss(eager(tokens), tokens).backward()
        eager_opt.step()
        eager_opt.zero_grad()
    assert step.out.weight is step.embed.weight
    for (name, p), (_, q) in zip(step.named_parameters(), eager.named_parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)
