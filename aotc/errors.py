"""The exceptions aotc raises. Each says what went wrong, why, and what to do.

The CLI turns an `AotcError` into `Error: <message>` and its `exit_code`; anything else
is an internal error (exit 2).
"""

from __future__ import annotations

import dataclasses


class AotcError(Exception):
    """Base class: a problem with the user's input, not a bug in aotc."""

    exit_code = 1


class ModelFileError(AotcError):
    """The model file is missing, does not import, or breaks the model-file convention."""


class CheckpointError(AotcError):
    """A checkpoint cannot be read or does not match the model's keys and shapes."""


class CaptureError(AotcError):
    """torch could not capture the model as a graph of the asked kind."""


class GraphBreakError(CaptureError):
    """A model torch cannot capture whole; `breaks` lists every place (aotc.capture.breaks)."""

    def __init__(self, message: str, breaks: list):
        super().__init__(message)
        self.breaks = breaks

    def to_json(self) -> dict:
        # plain dataclasses of str, int and list fields (aotc.bundle.regions_schema.BreakEntry)
        return {"error": str(self), "breaks": [dataclasses.asdict(b) for b in self.breaks]}


class DynamicShapeError(CaptureError):
    """A dim declared dynamic that torch.export proved cannot vary over the declared
    range, and no narrower range around the example's size holds: the code fixes its size
    (a view to constant sizes), or ties it in a way one graph cannot cover."""


class BundleError(AotcError):
    """A bundle on disk is missing a file, corrupted, or from an unknown format."""


class InternalError(RuntimeError):
    """aotc's own bug, not the user's input: e.g. a check refusing a bundle aotc is writing.
    Not an AotcError, so the CLI reports it as an internal error (exit 2) to be reported."""


class UnsupportedTorchError(AotcError):
    """The installed torch lacks an API aotc relies on."""


class InputError(AotcError):
    """A call to a loaded bundle got inputs that do not match its signature."""


class ModeError(AotcError):
    """A loaded bundle was asked for something its graphs cannot do (e.g. eval on a training bundle)."""


class FrozenWeightsError(AotcError):
    """New weights for a module whose compiled graph has its weights folded in."""


class GraphRunError(AotcError):
    """A loaded bundle's graph failed at run time on inputs that passed the signature
    checks, e.g. a token id past the end of an embedding table."""


class DeviceError(AotcError):
    """A device that is not a device name, not supported, or not present here."""


class CudaGraphError(AotcError):
    """CUDA-graph replay (`cuda_graphs=True`) asked for where a recording would not
    replay what eager does: not CUDA, random ops, CPU inputs, or past its recordings."""


class MissingDependencyError(AotcError):
    """An optional dependency is not installed; the message names the extra to install."""


class AmbientStateError(AotcError):
    """A loaded bundle was called under global state (autocast, default dtype,
    deterministic algorithms, torch-function modes, grad mode with inputs that require
    grad) that would make eager compute something other than the graphs do."""


class UntrustedSubclassError(AotcError):
    """A bundle holds tensors of a class aotc would have to import, and the user has not
    said they trust it (trusted_subclasses=, --trust)."""


class RegionError(AotcError):
    """A regional bundle does not fit the model it is applied to (a missing submodule,
    another class, other weight names or shapes)."""


class DistributedError(AotcError):
    """A loaded bundle was asked to train in a way torch.distributed cannot synchronize,
    e.g. a joint bundle's train_step under DDP or FSDP2."""


class RangeNarrowedWarning(UserWarning):
    """A dynamic dim exported over less than was declared: torch.export proved its graph
    only for the narrower range, which the bundle records (metadata.json keeps both)."""


class SignatureError(BundleError):
    """A bundle that must be signed (public keys are configured) is unsigned, signed by
    another key, or differs from what was signed; nothing from it is loaded."""


class UnsignedNativeCodeWarning(UserWarning):
    """Compiled native code loaded with no public keys configured: trusted because the
    bundle's own hashes match, which whoever can write the bundle can recompute."""
