"""The private inductor and AOTInductor APIs aotc uses: part of aotc._torch_compat (which
re-exports every name), in a module of its own because they are one concern: compiling,
loading compiled packages, and freezing.

Inductor is imported inside each function: loading a bundle must not pay for it.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import threading
from collections.abc import Callable

import torch

from aotc._torch_compat import SUPPORTED_TORCH  # defined before the package imports this module
from aotc.errors import UnsupportedTorchError


def inductor_cpu_isa():
    """The vector ISA inductor compiles CPU kernels for (it probes by compiling; slow once)."""
    from torch._inductor.cpu_vec_isa import pick_vec_isa  # inductor: only when compiling or fingerprinting

    return pick_vec_isa()


def inductor_cpp_compiler() -> str:
    from torch._inductor.cpp_builder import get_cpp_compiler  # inductor: only when compiling or fingerprinting

    return get_cpp_compiler()


_TMPDIR_LOCK = threading.Lock()


def aoti_package_loader(path: str, device_index: int, workdir: str, single_threaded: bool = False):
    """An AOTInductor package's loader (`run`, `boxed_run`), without torch's Python wrapper.

    `torch._inductor.aoti_load_package` first calls `get_device_information`, which picks
    the CPU vector ISA by compiling probe programs (seconds with a cold inductor cache;
    pytorch issue 191715) only to log a warning on mismatch. aotc checks the build
    fingerprint from /proc/cpuinfo instead, so it loads the package directly.

    The loader extracts the package into a fresh `aotinductor_*` directory under
    $TMPDIR and leaves it there when loading fails; $TMPDIR points at `workdir` while it
    runs, so the caller can remove whatever it left. `single_threaded`: the runner records
    no CUDA event per run, so a CUDA graph can capture it (aotc.runtime.cuda_graphs).
    """
    with _TMPDIR_LOCK:
        previous = os.environ.get("TMPDIR")
        os.environ["TMPDIR"] = workdir
        try:
            loader = torch._C._aoti.AOTIModelPackageLoader(path, "model", single_threaded, 1, device_index)
        finally:
            if previous is None:
                del os.environ["TMPDIR"]
            else:
                os.environ["TMPDIR"] = previous
    return loader


def inductor_freezing_on() -> None:
    """Turn inductor's freezing on for this process (bench's `torch.compile freezing`
    child). `torch.compile(options={"freezing": True})` does not reach the check in
    compile_fx that decides on freezing; the global config does."""
    import torch._inductor.config as inductor_config  # inductor: only when compiling

    inductor_config.freezing = True


def inductor_random_as_eager() -> None:
    """Make inductor's compiled code draw random numbers with eager's kernels in this
    process (bench's torch.compile children), as aotc's packages do (fallback_random in
    exporters/aoti_cache.COMPILE_OPTIONS): a training step's dropout then draws eager's
    masks under eager's seed, so its loss can be checked against eager's."""
    import torch._inductor.config as inductor_config  # inductor: only when compiling

    inductor_config.fallback_random = True


@contextlib.contextmanager
def record_constant_folding(on_fold: Callable[..., None]):
    """Call `on_fold(gm, node, constant, name, qualname)` each time inductor's freezing
    turns a node into a constant: a parameter placeholder (`node.op == "placeholder"`)
    or a computation over constants (a BatchNorm folded into a convolution, a weight
    prepacked for oneDNN). Called before the node leaves the graph, with the attribute
    name the constant gets. torch has no hook for this: its one helper, imported by name
    in two modules, is wrapped for the block."""
    import torch._inductor.constant_folding as constant_folding  # inductor: only when compiling
    import torch._inductor.freezing as freezing

    real = constant_folding.replace_node_with_constant

    def replace(gm, node, constant=None, name=None):
        if name:
            qualname = name
        else:  # the name replace_node_with_constant is about to pick
            i = getattr(gm, "_frozen_param_count", 0)
            while hasattr(gm, f"_frozen_param{i}"):
                i += 1
            qualname = f"_frozen_param{i}"
        on_fold(gm, node, constant, name, qualname)
        real(gm, node, constant, name)
        if constant is not None and getattr(gm, qualname, None) is not constant:
            raise UnsupportedTorchError(f"inductor's freezing named a folded constant other than {qualname!r}; "
                                        f"aotc's weight folding is tested with torch {SUPPORTED_TORCH}.")

    modules = (constant_folding, freezing)
    for m in modules:
        m.replace_node_with_constant = replace
    try:
        yield
    finally:
        for m in modules:
            m.replace_node_with_constant = real


@contextlib.contextmanager
def tail_safe_tiling():
    """Inductor's CPU kernels without the 2D tiling whose tail block stores a full vector.

    A CPU kernel tiled on two axes, a pointwise outer one and a reduction with another
    pointwise loop between them, stores each tail block's reduction at full vector width
    (pytorch issue 196681, in torch 2.13 and 2.14.1; its fix, PR 196882, is not merged): past
    the end of its output (heap corruption, "double free or corruption": Inkling-2's
    attention over two keys, a (16, 2) output tiled by 16) or over the next row's values.
    Such a kernel is tiled on its reduction axis alone instead, the way every row
    reduction is vectorized, or not vectorized where that axis is not a reduction."""
    from torch._inductor.codegen.cpp import TilingSelect  # inductor: only when compiling

    real = TilingSelect.select_tiling

    def select_tiling(self, fn_list, var_sizes_list):
        factors, indices, stats = real(self, fn_list, var_sizes_list)
        if len(indices) == 2:
            pointwise, reduction = max(var_sizes_list, key=lambda sizes: len(sizes[1]))
            if reduction and indices[0] + 1 < len(pointwise):  # torch checks the level after the outer axis only
                if indices[1] >= len(pointwise):
                    return factors[1:], indices[1:], stats
                return [], [], stats
        return factors, indices, stats

    TilingSelect.select_tiling = select_tiling
    try:
        yield
    finally:
        TilingSelect.select_tiling = real


def _never(match) -> bool:
    return False


@contextlib.contextmanager
def linear_post_ops_unfused():
    """Inside the block, the pointwise op after a prepacked linear (a residual add, GELU,
    SiLU, tanh) stays a generated kernel instead of becoming a oneDNN post-op of the linear.
    torch has no switch for it: the post-grad patterns that fuse into
    mkldnn._linear_pointwise are given a check that never matches, for the block.
    Convolutions' post-ops are left alone."""
    from torch._inductor.fx_passes import post_grad  # inductor: only when compiling

    if not torch._C._has_mkldnn:
        yield  # nothing is prepacked, so nothing fuses
        return
    post_grad.lazy_init()  # registers the patterns, once a process, in the order inductor does
    linear = torch.ops.mkldnn._linear_pointwise.default

    def fuses_into_linear(entry) -> bool:
        try:
            return inspect.getclosurevars(entry.extra_check).nonlocals.get("computation_op") is linear
        except TypeError:  # a check that is not a plain function
            return False

    # none found (another torch laid them out otherwise): the post-ops stay fused, slower, never wrong
    entries = [e for p in post_grad.pass_patterns for es in p.patterns.values() for e in es if fuses_into_linear(e)]
    checks = [e.extra_check for e in entries]
    for e in entries:
        e.extra_check = _never
    try:
        yield
    finally:
        for e, check in zip(entries, checks):
            e.extra_check = check
