"""Device names as users give them (--device, device=), checked once."""

from __future__ import annotations

import torch

from aotc.errors import DeviceError

SUPPORTED = ("cpu", "cuda")


def resolve_device(name: str | torch.device | None) -> torch.device:
    """`name` as a torch.device aotc can run on here; DeviceError naming it otherwise."""
    try:
        device = torch.device(name or "cpu")
    except (RuntimeError, TypeError) as e:
        raise DeviceError(f"device {name!r} is not a device name; use cpu, cuda or cuda:N.") from e
    if device.type not in SUPPORTED:
        raise DeviceError(f"device '{name}' is not supported; use cpu or cuda.")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise DeviceError(f"device '{name}' was asked for, but no CUDA device was found "
                          "(torch.cuda.is_available() is False).")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise DeviceError(f"device '{name}' is not present: this machine has {torch.cuda.device_count()} GPU(s).")
    return device


def with_index(device: torch.device) -> torch.device:
    """`device` naming its GPU: torch.export tells 'cuda' from 'cuda:0', so a graph moved to
    'cuda' refuses the inputs made on it (they are on cuda:0) when it is exported again."""
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device
