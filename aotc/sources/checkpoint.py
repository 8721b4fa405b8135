"""Loading weights into a model: safetensors first, `.pt`/`.bin` only as weights.

Nothing is ever unpickled: `.pt` files go through `torch.load(weights_only=True)`,
which refuses arbitrary objects.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from aotc.errors import CheckpointError

_MAX_LISTED = 5


def read_checkpoint(path: Path) -> dict[str, torch.Tensor]:
    """Read a flat name -> tensor mapping from a safetensors or weights-only torch file."""
    if not path.is_file():
        raise CheckpointError(
            f"Checkpoint '{path}' not found. Give an existing .safetensors (or .pt/.bin) "
            "file with --checkpoint, or fix CHECKPOINT in the model file."
        )
    suffix = path.suffix.lower()
    if suffix == ".safetensors":

        try:
            return load_file(str(path))
        except (SafetensorError, OSError, ValueError) as e:
            raise CheckpointError(
                f"Checkpoint '{path}' is not a readable safetensors file ({e}). "
                "Re-save it with safetensors.torch.save_file(model.state_dict(), path)."
            ) from e
    if suffix in (".pt", ".pth", ".bin"):
        try:
            state = torch.load(str(path), map_location="cpu", weights_only=True)
        except Exception as e:  # torch raises several types for a bad or unsafe file
            raise CheckpointError(
                f"Checkpoint '{path}' could not be read as weights only ({type(e).__name__}: "
                f"{str(e).splitlines()[0] if str(e) else ''}). aotc never unpickles "
                "arbitrary objects; convert it to safetensors."
            ) from e
        if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
            state = state["state_dict"]
        if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
            raise CheckpointError(
                f"Checkpoint '{path}' holds a {type(state).__name__}, not a mapping of names "
                "to tensors. Save model.state_dict() instead."
            )
        return state
    raise CheckpointError(
        f"Checkpoint '{path}' has suffix '{path.suffix}'; expected .safetensors, .pt, .pth or .bin."
    )


def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:_MAX_LISTED])
    more = len(names) - _MAX_LISTED
    return shown + (f" and {more} more" if more > 0 else "")


def apply_checkpoint(model: torch.nn.Module, path: Path) -> None:
    """Load `path` into `model`, refusing any missing, unexpected or mis-shaped key."""
    state = read_checkpoint(path)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    mismatched = [
        f"{k} (model {tuple(expected[k].shape)}, checkpoint {tuple(state[k].shape)})"
        for k in sorted(set(expected) & set(state))
        if expected[k].shape != state[k].shape
    ]
    problems = []
    if missing:
        problems.append(f"missing keys: {_listing(missing)}")
    if unexpected:
        problems.append(f"unexpected keys: {_listing(unexpected)}")
    if mismatched:
        problems.append(f"shape mismatches: {_listing(mismatched)}")
    if problems:
        raise CheckpointError(
            f"Checkpoint '{path}' does not match the model: {'; '.join(problems)}. "
            "Check that the checkpoint was saved from this model's state_dict()."
        )
    model.load_state_dict(state, strict=True)
