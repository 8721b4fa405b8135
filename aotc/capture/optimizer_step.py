"""A joint graph extended with its optimizer's update: the whole training step in one graph.

The captured joint graph computes (buffer updates, loss, gradients) from (parameters,
buffers, user inputs). `fuse_optimizer` re-exports it followed by `aotc.contract.optimizers.update`
on the parameters' gradients, taking the optimizer's state and hyperparameters as extra
inputs (before the lifted constants, which stay last) and returning the new parameters
and state after the joint graph's own outputs, which are unchanged (the runtime's
epilogue and loss still find them where they were). A parameter the loss does not reach
has no gradient: as in eager, the optimizer leaves it and its state alone, so it is not
in the update.
"""

from __future__ import annotations

import dataclasses

import torch

from aotc.bundle.schema import OptimizerInfo, Slot
from aotc.capture.flat_programs import CapturedGraph, carry_module_stacks, reexport
from aotc.contract import optimizers


class _FusedStep(torch.nn.Module):
    def __init__(self, joint, info: OptimizerInfo, n_model: int, n_state: int, params: list[int],
                 grads: list[int]):
        super().__init__()
        self.joint = joint
        self.info = info
        self.n_model, self.n_state = n_model, n_state
        self.param_inputs, self.grad_outputs = params, grads

    def forward(self, *args):
        n, k, h = self.n_model, self.n_state, len(optimizers.HYPERPARAMETERS[self.info.name])
        model_args, state, hyper, constants = args[:n], args[n:n + k], args[n + k:n + k + h], args[n + k + h:]
        outs = self.joint(*model_args, *constants)
        per = len(self.info.state)
        new_params, new_state = optimizers.update(
            self.info,
            [model_args[i] for i in self.param_inputs],
            [outs[j] for j in self.grad_outputs],
            [list(state[m * per:(m + 1) * per]) for m in range(len(self.param_inputs))],
            dict(zip(optimizers.HYPERPARAMETERS[self.info.name], hyper)),
        )
        return (*outs, *new_params, *new_state)


def fuse_optimizer(joint: CapturedGraph, info: OptimizerInfo, state: dict[str, torch.Tensor]) -> CapturedGraph:
    """`joint` followed by `info`'s update (see the module docstring)."""
    sig = joint.signature
    model_slots = [s for s in sig.inputs if s.role != "constant"]
    const_slots = [s for s in sig.inputs if s.role == "constant"]
    grad_of = {s.name.removeprefix("grad:"): j for j, s in enumerate(sig.outputs) if s.role == "gradient"}
    position = {s.target: i for i, s in enumerate(model_slots) if s.role == "parameter"}
    updated = [fqn for fqn in info.parameters if fqn in position and model_slots[position[fqn]].name in grad_of]
    params = [position[fqn] for fqn in updated]
    grads = [grad_of[model_slots[i].name] for i in params]

    state_keys = [f"{fqn}/{key}" for fqn in updated for key in info.state]
    hyper_names = optimizers.HYPERPARAMETERS[info.name]
    n_model = len(model_slots)
    examples = joint.example_inputs
    state_values = [state[k] for k in state_keys]
    hyper_values = optimizers.hyper_tensors(info, info.hyperparameters, "cpu")
    inputs = [*examples[:n_model], *state_values, *hyper_values, *examples[n_model:]]
    fake = [p.meta.get("val") for p in joint.program.graph.find_nodes(op="placeholder")]
    fake = [*fake[:n_model], *state_values, *hyper_values, *fake[n_model:]]
    step = _FusedStep(joint.program.module(), info, n_model, len(state_keys), params, grads)
    program = reexport(step, inputs, fake, "joint")
    carry_module_stacks(joint.program.graph_module, program, joint.module_stacks)

    in_slots = [
        *model_slots,
        *(Slot(f"optimizer:{k}", "optimizer_state", k, None) for k in state_keys),
        *(Slot(f"optimizer:{name}", "hyperparameter", name, None) for name in hyper_names),
        *const_slots,
    ]
    out_slots = [
        *sig.outputs,
        *(Slot(f"updated:{fqn}", "updated_parameter", fqn, None) for fqn in updated),
        *(Slot(f"updated:{k}", "optimizer_state", k, None) for k in state_keys),
    ]
    signature = dataclasses.replace(sig, inputs=in_slots, outputs=out_slots)
    return dataclasses.replace(joint, program=program, signature=signature, example_inputs=inputs)
