"""Every private torch import aotc uses, in one place.

aotc is written against torch 2.13. When a private API moves, this module is the only
one to change; until then, an unsupported torch fails here with a clear message instead
of an AttributeError deep inside capture.
"""

from __future__ import annotations

import torch

from aotc.errors import UnsupportedTorchError

SUPPORTED_TORCH = "2.13"

try:
    from torch._functorch._aot_autograd.collect_metadata_analysis import (
        run_functionalized_fw_and_collect_metadata,
    )
    from torch._functorch._aot_autograd.descriptors import (
        AOTInput,
        AOTOutput,
        BufferAOTInput,
        GradAOTOutput,
        InputMutationAOTOutput,
        IntermediateBaseAOTOutput,
        ParamAOTInput,
        PlainAOTInput,
        PlainAOTOutput,
        SavedForBackwardsAOTOutput,
        TangentAOTInput,
    )
    from torch._functorch._aot_autograd.schemas import (
        MutationType,
        OutputType,
        ViewAndMutationMeta,
    )
    from torch._functorch.aot_autograd import (
        aot_compile_joint_with_descriptors,
        aot_export_joint_with_descriptors,
    )
    from torch._functorch.partitioners import (
        default_partition,
        min_cut_rematerialization_partition,
    )
    from torch._ops import OpOverload
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
    import torch.utils._pytree as pytree
except ImportError as e:  # pragma: no cover - depends on the installed torch
    raise UnsupportedTorchError(
        f"aotc needs torch {SUPPORTED_TORCH}.x, but torch {torch.__version__} lacks "
        f"an API it uses ({e}). Install the supported version: "
        f"pip install torch=={SUPPORTED_TORCH}.0"
    ) from e

def inductor_cpu_isa():
    """The vector ISA inductor compiles CPU kernels for (it probes by compiling; slow once)."""
    from torch._inductor.cpu_vec_isa import pick_vec_isa

    return pick_vec_isa()


def inductor_cpp_compiler() -> str:
    from torch._inductor.cpp_builder import get_cpp_compiler

    return get_cpp_compiler()


PARTITIONERS = {
    "min-cut": min_cut_rematerialization_partition,
    "default": default_partition,
}

__all__ = [
    "AOTInput",
    "AOTOutput",
    "BufferAOTInput",
    "FakeTensor",
    "FakeTensorMode",
    "GradAOTOutput",
    "InputMutationAOTOutput",
    "IntermediateBaseAOTOutput",
    "MutationType",
    "OpOverload",
    "OutputType",
    "PARTITIONERS",
    "ParamAOTInput",
    "PlainAOTInput",
    "PlainAOTOutput",
    "SavedForBackwardsAOTOutput",
    "TangentAOTInput",
    "ViewAndMutationMeta",
    "inductor_cpp_compiler",
    "inductor_cpu_isa",
    "aot_compile_joint_with_descriptors",
    "aot_export_joint_with_descriptors",
    "pytree",
    "reference_metadata",
    "run_functionalized_fw_and_collect_metadata",
]


def reference_metadata(fn, flat_args: list) -> ViewAndMutationMeta:
    """AOTAutograd's own mutation/alias analysis of `fn(*flat_args)`.

    An independent path to the same facts capture records (used by the tests to check
    aotc's metadata against torch's). `flat_args` are real tensors; they are faked here
    so nothing is mutated.
    """
    mode = FakeTensorMode()
    fake_args = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in flat_args]
    descs = [PlainAOTInput(i) for i in range(len(fake_args))]
    with mode:
        return run_functionalized_fw_and_collect_metadata(
            fn, flat_args_descs=descs, keep_input_mutations=False
        )(*fake_args)
