"""The `aoti` format: each graph compiled ahead of time by AOTInductor.

`compiled/<device>/<kind>.pt2` is an AOTInductor package. The graphs take parameters and
buffers as inputs, so a package holds code only: the weights stay in
weights.safetensors, stored once for every graph and device.
"""

from __future__ import annotations

from pathlib import Path

import torch

from aotc.errors import AotcError, BundleError
from aotc.fingerprint import check_fingerprint

FORMAT = "aoti"

# Inductor options that shape the artifact; part of the compile cache key.
# fallback_random: random ops (dropout) call eager's kernels, so under the same seed a
# compiled bundle draws the same masks as eager instead of inductor's own RNG stream.
COMPILE_OPTIONS: dict[str, object] = {"fallback_random": True}


def artifact_path(device: str, kind: str) -> str:
    return f"compiled/{device}/{kind}.pt2"


def compile_graph(program, example_inputs: list, package_path: Path) -> None:
    """AOTInductor-compile `program` (an ExportedProgram) for the device of its inputs."""
    from torch._inductor import aoti_compile_and_package

    program.example_inputs = (tuple(example_inputs), {})
    try:
        aoti_compile_and_package(program, package_path=str(package_path), inductor_configs=dict(COMPILE_OPTIONS))
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise AotcError(f"AOTInductor could not compile the graph: {type(e).__name__}: {first}") from e
    finally:
        program.example_inputs = None


class CompiledGraph:
    """An AOTInductor package as a callable over flat tensors, returning a list."""

    def __init__(self, run):
        self._run = run

    def __call__(self, *args):
        return self._run(list(args))


def load_graph(bundle, kind: str, device: torch.device) -> CompiledGraph:
    rel = artifact_path(device.type, kind)
    entry = bundle.manifest.file(rel)
    if entry is None:
        have = sorted({f.device for f in bundle.manifest.files if f.kind == "compiled"})
        raise BundleError(
            f"Bundle '{bundle.path}' has no compiled {kind} graph for {device.type}"
            + (f"; it has compiled artifacts for {', '.join(have)}." if have else "; it has no compiled artifacts.")
            + f" Run: aotc compile {bundle.path} --device {device.type}"
        )
    check_fingerprint(entry.build, device, f"'{rel}' in bundle '{bundle.path}'")
    from aotc._torch_compat import aoti_package_runner

    index = device.index if device.index is not None else -1
    return CompiledGraph(aoti_package_runner(str(bundle.path / rel), index))


def has_artifacts(bundle, device: torch.device) -> bool:
    return all(bundle.manifest.file(artifact_path(device.type, k)) is not None for k in bundle.graph_kinds)
