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
    return device
