"""What a compiled artifact was built for, and whether this machine can run it.

Recorded per artifact in the manifest at compile time; checked by `aotc.load` before it
loads native code, so an artifact built for another torch, CPU instruction set or CUDA
architecture is refused with the difference named, instead of crashing or recompiling.
Checking reads /proc/cpuinfo once; it never probes the CPU by compiling test programs.
"""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

import torch

from aotc import _torch_compat as tc
from aotc.errors import BundleError

Fingerprint = dict[str, str]

# gcc -m flags whose /proc/cpuinfo names differ from the flag's spelling
_FLAG_NAMES = {"avx512bf16": "avx512_bf16", "avx512vnni": "avx512_vnni", "amx-tile": "amx_tile",
               "amx-bf16": "amx_bf16", "amx-int8": "amx_int8"}


def _required_cpu_flags(arch_flags: str) -> list[str]:
    names = []
    for flag in arch_flags.split():
        if flag.startswith("-m") and not flag.startswith("-march"):
            name = flag[2:]
            names.append(_FLAG_NAMES.get(name, name.replace("-", "_")))
    return sorted(set(names))


@functools.cache
def cpu_flags() -> frozenset[str]:
    """This CPU's feature flags (Linux /proc/cpuinfo; empty elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    match = re.search(r"^(?:flags|Features)\s*:\s*(.*)$", text, re.MULTILINE)
    return frozenset(match.group(1).split()) if match else frozenset()


def _compiler_version(compiler: str) -> str:
    try:
        out = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=30)
        return out.stdout.splitlines()[0].strip() if out.stdout else compiler
    except (OSError, subprocess.SubprocessError):
        return compiler


def build_fingerprint(device: torch.device) -> Fingerprint:
    """The target of a compile on `device` (called at compile time, where probing is fine)."""

    fp = {"torch": torch.__version__, "device": device.type}
    compiler = tc.inductor_cpp_compiler()
    fp["compiler"] = _compiler_version(compiler)
    if device.type == "cpu":
        isa = tc.inductor_cpu_isa()
        fp["cpu_isa"] = str(isa) if isa else "none"
        fp["cpu_flags"] = ",".join(_required_cpu_flags(isa.build_arch_flags())) if isa else ""
    elif device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        fp["cuda_arch"] = f"sm_{major}{minor}"
        fp["cuda"] = str(torch.version.cuda)
    return fp


def check_fingerprint(recorded: Fingerprint | None, device: torch.device, what: str) -> None:
    """Raise BundleError naming the first way this machine differs from the build target."""
    if not recorded:
        raise BundleError(f"{what} records no build fingerprint; compile the bundle again with aotc compile.")
    if recorded.get("torch") != torch.__version__:
        raise BundleError(
            f"{what} was built for torch {recorded.get('torch')}, this is torch {torch.__version__}. "
            "Compile the bundle again (aotc compile BUNDLE), or use backend='fx'."
        )
    if recorded.get("device") != device.type:
        raise BundleError(f"{what} was built for {recorded.get('device')}, not {device.type}.")
    if device.type == "cpu":
        needed = [f for f in recorded.get("cpu_flags", "").split(",") if f]
        have = cpu_flags()
        missing = [f for f in needed if have and f not in have]
        if missing:
            raise BundleError(
                f"{what} was built for CPU instruction set {recorded.get('cpu_isa')}, but this CPU "
                f"lacks {', '.join(missing)}. Compile the bundle on this machine, or use backend='fx'."
            )
    elif device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        here = f"sm_{major}{minor}"
        if recorded.get("cuda_arch") != here:
            raise BundleError(
                f"{what} was built for CUDA architecture {recorded.get('cuda_arch')}, this GPU is "
                f"{here}. Compile the bundle on this machine, or use backend='fx'."
            )
