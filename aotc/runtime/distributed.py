"""Loaded bundles under torch.distributed: what can train there, and what is refused.

A forward+backward bundle trains under DistributedDataParallel and FSDP2
(`fully_shard`) as the eager model does: its backward runs through autograd, so DDP's
hooks all-reduce the gradients and FSDP2 gathers parameters and reduce-scatters
gradients around it. A joint bundle cannot: `train_step` computes every gradient inside
one graph and sets `.grad` itself, which neither wrapper sees. `check_joint_step`
refuses that before anything runs.
"""

from __future__ import annotations

import torch
from torch import nn

from aotc.errors import DistributedError

_AVAILABLE = torch.distributed.is_available()  # False on builds without distributed support
_USE_AUTOGRAD_BUNDLE = (
    "Export a forward+backward bundle instead (aotc export MODEL --autograd, or "
    "graphs=(\"forward\", \"backward\")), load it with mode=\"train\" and wrap it in "
    "DistributedDataParallel or fully_shard; its backward runs through autograd, where "
    "they synchronize the gradients."
)


def check_joint_step(module: nn.Module) -> None:
    """Raise DistributedError when a joint training step on `module` would not be
    synchronized: torch.distributed runs more than one process, or a parameter is a
    DTensor (sharded by FSDP2's fully_shard). Costs under 0.5 µs when no process group is
    initialized (a DTensor needs one, so nothing else is looked at)."""
    if not _AVAILABLE or not torch.distributed.is_initialized():
        return
    dist = torch.distributed
    from torch.distributed.tensor import DTensor  # only under an initialized process group

    path = getattr(module, "bundle_path", "<bundle>")
    for name, param in module.named_parameters():
        if isinstance(param, DTensor):
            raise DistributedError(
                f"train_step of joint bundle '{path}' cannot run on sharded parameters: "
                f"'{name}' is a DTensor (FSDP2's fully_shard). The joint graph computes every "
                "gradient inside one graph, on whole tensors, and sets .grad itself, so FSDP2 "
                "neither gathers the parameters for it nor reduce-scatters its gradients. "
                + _USE_AUTOGRAD_BUNDLE
            )
    world = dist.get_world_size()
    if world > 1:
        raise DistributedError(
            f"train_step of joint bundle '{path}' would not synchronize gradients across the "
            f"{world} processes of torch.distributed: the joint graph computes every gradient "
            "inside one graph and sets .grad directly, so DistributedDataParallel's autograd "
            "hooks never see them and no all-reduce happens (each process would step on its "
            "own gradients). " + _USE_AUTOGRAD_BUNDLE
        )
