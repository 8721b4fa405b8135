"""The optimizer a joint bundle can carry: the whole training step (loss, gradients and
the update) in one graph.

`describe(optimizer, model)` checks that aotc can replay a `torch.optim` instance and
says what the graph needs (an `OptimizerInfo`, stored in metadata.json); `update` is the
optimizer's arithmetic over tensors, traced into the joint graph after the gradients.
Hyperparameters are graph inputs (0-d float64 tensors, as eager's Python floats), so a
scheduler that changes them between steps is followed; what changes the graph's structure
(nesterov, maximize, whether SGD has momentum at all) is fixed at export and checked at
every step. The formulas follow torch.optim's single-tensor CPU implementations
(`_single_tensor_sgd`, `_single_tensor_adam` with decoupled weight decay) op for op.
"""

from __future__ import annotations

import torch

from aotc import _torch_compat as tc
from aotc.bundle.schema import OptimizerInfo
from aotc.errors import AotcError, ModeError

HYPERPARAMETERS = {
    "sgd": ("lr", "momentum", "weight_decay"),
    "adamw": ("lr", "beta1", "beta2", "eps", "weight_decay"),
}
SUPPORTED = "torch.optim.SGD (momentum, weight decay, nesterov, maximize) and torch.optim.AdamW"
# state file of a joint bundle that carries its optimizer: '<fqn>/<key>' per tensor
OPTIMIZER_STATE = "optimizer.safetensors"


def kind_of(optimizer) -> str | None:
    if type(optimizer) is torch.optim.SGD:
        return "sgd"
    if type(optimizer) is torch.optim.AdamW:
        return "adamw"
    return None


def refusal(what: str) -> AotcError:
    return AotcError(f"aotc cannot put this optimizer in the joint graph: {what}. Supported: {SUPPORTED}, with "
                     "one parameter group over every parameter that requires grad.")


def hyperparameters(kind: str, group: dict) -> dict[str, float]:
    """The graph's hyperparameter inputs from a torch.optim param group."""
    if kind == "sgd":
        values = {"lr": group["lr"], "momentum": group["momentum"], "weight_decay": group["weight_decay"]}
    else:
        beta1, beta2 = group["betas"]
        values = {"lr": group["lr"], "beta1": beta1, "beta2": beta2, "eps": group["eps"],
                  "weight_decay": group["weight_decay"]}
    return {k: float(v) for k, v in values.items()}


def describe(optimizer, model: torch.nn.Module) -> OptimizerInfo:
    """What the joint graph of `model` needs to carry `optimizer`; AotcError naming what
    aotc cannot replay exactly as `optimizer.step()` would."""
    kind = kind_of(optimizer)
    if kind is None:
        raise refusal(f"{type(optimizer).__module__}.{type(optimizer).__qualname__} is not supported")
    if len(optimizer.param_groups) != 1:
        raise refusal(f"it has {len(optimizer.param_groups)} parameter groups")
    group = optimizer.param_groups[0]
    names = {id(p): n for n, p in model.named_parameters()}
    params = group["params"]
    unknown = [i for i, p in enumerate(params) if id(p) not in names]
    if unknown:
        raise refusal(f"its parameters {unknown} are not parameters of {type(model).__name__}")
    held = {id(p) for p in params}
    missing = [n for n, p in model.named_parameters() if p.requires_grad and id(p) not in held]
    if missing:
        raise refusal(f"it does not update {', '.join(missing)}, which require grad")
    frozen = [names[id(p)] for p in params if not p.requires_grad]
    if frozen:
        raise refusal(f"it holds {', '.join(frozen)}, which do not require grad")
    if group.get("differentiable"):
        raise refusal("differentiable=True")
    if kind == "sgd":
        if group["dampening"] != 0:
            raise refusal(f"dampening={group['dampening']} (only 0)")
        options = {"nesterov": bool(group["nesterov"]), "maximize": bool(group["maximize"])}
        state = ["momentum_buffer"] if group["momentum"] != 0 else []
    else:
        if group["amsgrad"]:
            raise refusal("amsgrad=True")
        options = {"maximize": bool(group["maximize"])}
        state = ["step", "exp_avg", "exp_avg_sq"]
    return OptimizerInfo(name=kind, hyperparameters=hyperparameters(kind, group), options=options,
                         parameters=[names[id(p)] for p in params], state=state)


def initial_state(info: OptimizerInfo, optimizer, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The optimizer's state by '<fqn>/<key>': what `optimizer` holds (steps it already
    took), else what torch.optim starts from (zeros; step 0)."""
    out = {}
    for fqn in info.parameters:
        p = model.get_parameter(fqn)
        held = optimizer.state.get(p, {}) if optimizer is not None else {}
        for key in info.state:
            value = held.get(key)
            if value is None:
                value = torch.zeros((), dtype=torch.float32) if key == "step" else torch.zeros_like(p)
            out[f"{fqn}/{key}"] = value.detach().clone().contiguous()
    return out


def update(info: OptimizerInfo, params: list, grads: list, state: list[list], hyper: dict) -> tuple[list, list]:
    """New parameters and new state tensors (per parameter, in `info.state` order) after
    one step; `hyper` holds 0-d float64 tensors."""
    step = _sgd if info.name == "sgd" else _adamw
    if info.name == "adamw" and params:
        hyper = {**hyper, **_adam_corrections(state, hyper)}
    new_params, new_state = [], []
    for i, (p, g, s) in enumerate(zip(params, grads, state)):
        if info.options.get("maximize"):
            g = -g
        p, s = step(info, p, g, s, {k: v[i] if k in _PER_PARAMETER else v for k, v in hyper.items()})
        new_params.append(p)
        new_state.extend(s)
    return new_params, new_state


_PER_PARAMETER = ("step", "step_size", "bias_correction2_sqrt")


def _adam_corrections(state: list[list], h: dict) -> dict:
    """Every parameter's new step count and bias corrections, in double as eager's (which
    reads step.item()), computed once for all parameters as vectors.

    Written as beta ** step, inductor inlines the two double pow()s into each parameter's
    update loop and redoes them for every 16 elements (resnet18's AdamW step: 24 ms of
    update against eager's 12 ms). exp(step * log(beta)) equals beta ** step to ~1e-13
    relative at any step count, far below float32's rounding, and inductor computes a
    reused exp once rather than inlining it."""
    steps = [s[0] + 1 for s in state]  # the new state: outputs of their own, not views of one
    step = torch.stack(steps).to(torch.float64)
    return {"step": steps, "step_size": h["lr"] / (1 - torch.exp(step * torch.log(h["beta1"]))),
            "bias_correction2_sqrt": (1 - torch.exp(step * torch.log(h["beta2"]))).sqrt()}


def _sgd(info, p, g, s, h):
    g = g + p * h["weight_decay"].to(p.dtype)
    if info.state:  # momentum (dampening 0): from a zero buffer, the first step's buf is g itself
        momentum = h["momentum"].to(p.dtype)
        buf = s[0] * momentum + g
        g = g + buf * momentum if info.options["nesterov"] else buf
        s = [buf]
    return p - g * h["lr"].to(p.dtype), s


def _adamw(info, p, g, s, h):
    """One parameter's update; h holds its new step count and bias corrections (in double,
    as eager's from step.item()), see _adam_corrections."""
    _, exp_avg, exp_avg_sq = s
    lr, beta1, beta2 = h["lr"], h["beta1"], h["beta2"]
    p = p * (1 - lr * h["weight_decay"]).to(p.dtype)
    exp_avg = torch.lerp(exp_avg, g, (1 - beta1).to(p.dtype))
    exp_avg_sq = exp_avg_sq * beta2.to(p.dtype) + (1 - beta2).to(p.dtype) * g * g
    denom = exp_avg_sq.sqrt() / h["bias_correction2_sqrt"].to(p.dtype) + h["eps"].to(p.dtype)
    return p - h["step_size"].to(p.dtype) * (exp_avg / denom), [h["step"], exp_avg, exp_avg_sq]


def hyper_tensors(info: OptimizerInfo, values: dict[str, float], device) -> list[torch.Tensor]:
    return [torch.tensor(values[k], dtype=torch.float64, device=device) for k in HYPERPARAMETERS[info.name]]


def build(info: OptimizerInfo, model: torch.nn.Module, state: dict[str, torch.Tensor]):
    """A real torch.optim instance over `model`'s parameters holding the bundle's
    hyperparameters and state: what a loaded joint bundle exposes as `.optimizer`, for
    schedulers, state_dict() and load_state_dict()."""
    params = [model.get_parameter(fqn) for fqn in info.parameters]
    h = info.hyperparameters
    if info.name == "sgd":
        opt = torch.optim.SGD(params, lr=h["lr"], momentum=h["momentum"], weight_decay=h["weight_decay"],
                              nesterov=info.options["nesterov"], maximize=info.options["maximize"])
    else:
        opt = torch.optim.AdamW(params, lr=h["lr"], betas=(h["beta1"], h["beta2"]), eps=h["eps"],
                                weight_decay=h["weight_decay"], maximize=info.options["maximize"])
    for fqn, p in zip(info.parameters, params):
        for key in info.state:
            # the step count too on the parameters' device: the graph was compiled with it there
            opt.state[p][key] = state[f"{fqn}/{key}"].to(p.device).clone()
    return opt


def for_module(module: torch.nn.Module, bundle, info: OptimizerInfo):
    """A loaded joint bundle's optimizer (torch.optim's, holding the bundle's state on the
    parameters' device) and the FusedOptimizer that feeds it to the graph."""
    optimizer = build(info, module, bundle.optimizer_state())
    sig = bundle.signature.graphs["joint"]
    updated = [s.target for s in sig.outputs if s.role == "updated_parameter"]
    # where each updated parameter sits among the runtime's primals (the graph's inputs
    # without constants and the optimizer's own)
    model_slots = [s for s in sig.inputs if s.role not in ("constant", "optimizer_state", "hyperparameter")]
    position = {s.target: i for i, s in enumerate(model_slots) if s.role == "parameter"}
    params = [module.get_parameter(fqn) for fqn in updated]
    return optimizer, FusedOptimizer(info, optimizer, params, [position[fqn] for fqn in updated])


class FusedOptimizer:
    """Per step: the hyperparameter and state inputs of the graph from the module's
    optimizer, and after the graph, its new parameters and state copied into place."""

    def __init__(self, info: OptimizerInfo, optimizer, params: list[torch.Tensor], positions: list[int]):
        self.info = info
        self.positions = positions  # of `params` among the joint graph's primals
        self.optimizer = optimizer
        self.group = list(optimizer.param_groups[0]["params"])  # every parameter it holds, in order
        self.params = params  # those the graph updates (a parameter the loss does not reach is not)
        self.names = HYPERPARAMETERS[info.name]
        self.num_outputs = len(params) * (1 + len(info.state))  # new parameters, then new state
        self._hyper: tuple = ((), [])  # (values, tensors) of the last step
        self._state_inputs: list[torch.Tensor] = []

    def inputs(self, primals: list) -> list[torch.Tensor]:
        if any(primals[i] is not p for i, p in zip(self.positions, self.params)):
            # the graph would read the new tensor and the update would go to the old one
            raise ModeError("a parameter of this joint bundle was replaced after load; its optimizer holds the "
                            "parameter it was loaded with. Copy new values in place (load_state_dict, "
                            "param.data.copy_) instead of assigning a new Parameter.")
        group = self._check_group()
        current = hyperparameters(self.info.name, group)
        values = tuple(current[k] for k in self.names)
        if values != self._hyper[0]:
            self._hyper = (values, hyper_tensors(self.info, current, self.group[0].device))
        self._state_inputs = self._state()
        return [*self._state_inputs, *self._hyper[1]]

    def _state(self) -> list[torch.Tensor]:
        state, keys = self.optimizer.state, self.info.state
        out = []
        for p in self.params:
            held = state[p]
            for key in keys:
                value = held.get(key)
                if value is None:  # after load_state_dict of a fresh optimizer: torch's starting state
                    value = held[key] = (torch.zeros((), dtype=torch.float32, device=p.device) if key == "step"
                                         else torch.zeros_like(p))
                elif key == "step" and value.device != p.device:  # load_state_dict keeps steps on the CPU
                    value = held[key] = value.to(p.device)
                out.append(value)
        if len(out) != len(self._state_inputs) or any(a is not b for a, b in zip(out, self._state_inputs)):
            self._check_state(out)  # new tensors (load_state_dict): the compiled graph reads them blind
        return out

    def _check_state(self, values: list[torch.Tensor]) -> None:
        per = len(self.info.state)
        for k, value in enumerate(values):
            p, key = self.params[k // per], self.info.state[k % per]
            want = ((), torch.float32, p.device) if key == "step" else (p.shape, p.dtype, p.device)
            if (value.shape, value.dtype, value.device) != want or not value.is_contiguous():
                raise ModeError(
                    f"the optimizer's '{key}' state of a parameter shaped {tuple(p.shape)} is a {value.dtype} "
                    f"{tuple(value.shape)} on {value.device}; the joint graph takes a contiguous {want[1]} "
                    f"{tuple(want[0])} on {want[2]}. Load a state_dict saved from this bundle's optimizer."
                )

    def _check_group(self) -> dict:
        groups = self.optimizer.param_groups
        if len(groups) != 1 or len(groups[0]["params"]) != len(self.group) or any(
                a is not b for a, b in zip(groups[0]["params"], self.group)):
            raise ModeError("the optimizer of this joint bundle must keep its one parameter group over the module's "
                            "parameters; train_step replays the optimizer the bundle was exported with.")
        group = groups[0]
        changed = [k for k, v in self.info.options.items() if bool(group.get(k)) != v]
        if self.info.name == "sgd" and (group["momentum"] != 0) != bool(self.info.state):
            changed.append("momentum (zero or not)")
        if group.get("dampening", 0) != 0 or group.get("amsgrad"):
            changed.append("dampening" if group.get("dampening", 0) else "amsgrad")
        if changed:
            raise ModeError(f"the optimizer's {', '.join(changed)} changed since export: they fix the joint graph's "
                            "structure. Export the bundle again with the new settings.")
        return group

    def apply(self, new_values: list[torch.Tensor]) -> None:
        """Copy the graph's new parameters and state into place (as opt.step() updates
        them); called under no_grad."""
        pairs = [(t, v) for t, v in zip([*self.params, *self._state_inputs], new_values) if t is not v]
        if pairs:  # a compiled graph may have written them in place (exporters/aoti_updates.py)
            torch._foreach_copy_([t for t, _ in pairs], [v for _, v in pairs])
        tc.mark_optimizer_stepped(self.optimizer)
