"""Every private torch import aotc uses, in one place.

aotc is tested against the torch minor versions in TESTED_TORCH. When a private API
moves, this module is the only one to change. Importing it under any other torch raises
UnsupportedTorchError naming the tested versions (AOTC_UNTESTED_TORCH=1 goes on with a
warning), instead of an AttributeError deep inside capture or a quietly different graph.

Capture-time names are imported on first use: loading a bundle must not pay for
importing AOTAutograd (about 1 s).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import sysconfig
import warnings
from collections.abc import Callable
from typing import Any

import torch

from aotc.errors import UnsupportedTorchError

# The torch minor versions `make test` (2.13) and `make test-torch TORCH=2.11.0` (2.12.1,
# 2.14.1, 2.15.0) run aotc's tests under; pyproject.toml's requirement is the same range.
TESTED_TORCH = ("2.11", "2.12", "2.13", "2.14", "2.15")
SUPPORTED_TORCH = f"{TESTED_TORCH[0]} to {TESTED_TORCH[-1]}"  # for messages
_MAJOR, _LAST = TESTED_TORCH[-1].split(".")
INSTALL_HINT = f"pip install 'torch>={TESTED_TORCH[0]},<{_MAJOR}.{int(_LAST) + 1}'"


def torch_minor(version: str) -> str:
    """'2.14' of '2.14.1+cpu' or '2.14.0.dev20260101'."""
    return ".".join(version.split("+")[0].split(".")[:2])


def _check_tested() -> None:
    here = torch_minor(torch.__version__)
    if here in TESTED_TORCH:
        return
    message = (f"aotc is tested with torch {SUPPORTED_TORCH}; this is torch {torch.__version__}, whose "
               f"private APIs (AOTAutograd, torch.export, inductor) aotc has not been checked against. Install "
               f"a tested torch ({INSTALL_HINT}), or set AOTC_UNTESTED_TORCH=1 to try this one.")
    if os.environ.get("AOTC_UNTESTED_TORCH") == "1":
        warnings.warn(message.replace(", or set AOTC_UNTESTED_TORCH=1 to try this one.", ". Going on: "
                                      "AOTC_UNTESTED_TORCH=1 is set."), stacklevel=2)
        return
    raise UnsupportedTorchError(message)


_check_tested()

# after the check: under an untested torch these may be missing or moved
import torch.utils._pytree as pytree
from torch._C._dynamo.guards import GlobalStateGuard, TensorGuards
from torch._export.serde.schema import SCHEMA_VERSION
from torch._guards import TracingContext, tracing
from torch.nn.modules import module as nn_module
from torch._ops import OpOverload, OpOverloadPacket
from torch.overrides import _get_current_function_mode_stack

MKLDNN_LAYOUT = torch._mkldnn  # the layout of oneDNN-prepacked weights

_DESCRIPTORS = "torch._functorch._aot_autograd.descriptors"
_LAZY = {
    "run_functionalized_fw_and_collect_metadata": "torch._functorch._aot_autograd.collect_metadata_analysis",
    **dict.fromkeys((
        "AOTInput", "AOTOutput", "BufferAOTInput", "GradAOTOutput", "InputMutationAOTOutput",
        "IntermediateBaseAOTOutput", "ParamAOTInput", "PlainAOTInput", "PlainAOTOutput",
        "SavedForBackwardsAOTOutput", "TangentAOTInput", "ViewBaseAOTInput", "SyntheticBaseAOTInput",
        "MetadataMutationAOTOutput", "ForwardTokenAOTInput", "SubclassGetAttrAOTInput", "SubclassGetAttrAOTOutput",
        "BackwardTokenAOTInput",
    ), _DESCRIPTORS),
    "is_traceable_wrapper_subclass": "torch.utils._python_dispatch",
    "MutationType": "torch._functorch._aot_autograd.schemas",
    "OutputType": "torch._functorch._aot_autograd.schemas",
    "ViewAndMutationMeta": "torch._functorch._aot_autograd.schemas",
    "aot_compile_joint_with_descriptors": "torch._functorch.aot_autograd",
    "aot_export_joint_with_descriptors": "torch._functorch.aot_autograd",
    "default_partition": "torch._functorch.partitioners",
    "min_cut_rematerialization_partition": "torch._functorch.partitioners",
    "FakeTensor": "torch._subclasses.fake_tensor",
    "FakeTensorMode": "torch._subclasses.fake_tensor",
    "FunctionalTensor": "torch._subclasses.functional_tensor",
}


def _private(name: str) -> Any:
    try:
        return getattr(importlib.import_module(_LAZY[name]), name)
    except (ImportError, AttributeError) as e:  # pragma: no cover - depends on the installed torch
        raise UnsupportedTorchError(
            f"aotc is tested with torch {SUPPORTED_TORCH}, but torch {torch.__version__} lacks "
            f"{_LAZY[name]}.{name}, which it uses. Install a tested torch: {INSTALL_HINT}"
        ) from e


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = _private(name)
        globals()[name] = value
        return value
    if name == "PARTITIONERS":
        value = {"min-cut": _private("min_cut_rematerialization_partition"), "default": _private("default_partition")}
        globals()[name] = value
        return value
    raise AttributeError(f"module 'aotc._torch_compat' has no attribute {name!r}")


PARTITIONER_NAMES = ("min-cut", "default")


def export_schema_version() -> tuple[int, int]:
    """(major, minor) of torch.export's serialization format: torch.export.load refuses
    another major; a newer minor may hold what this torch cannot read."""
    return tuple(SCHEMA_VERSION)


def distributions_check_arguments() -> bool:
    """Whether torch.distributions checks its arguments by default (torch's default: under
    __debug__). Dynamo's first use in a process turns the checks off for good
    (TorchPatcher.patch), which changes what eager and torch.export do after it."""
    return bool(torch.distributions.Distribution._validate_args)


def dynamo_explain(model, args: tuple, kwargs: dict) -> Any:
    """torch._dynamo.explain of one call: graphs, and every graph break with its reason
    and user stack. Dynamo's caches are reset before and after, so nothing it compiled
    stays behind, and torch.distributions' argument checks are as they were (GroupViT's
    Gumbel sampling exported in training mode after a break report, and not before)."""
    import torch._dynamo  # Dynamo is imported only by capture: aotc.load never pays for it

    checks = distributions_check_arguments()
    torch._dynamo.reset()
    try:
        return torch._dynamo.explain(model)(*args, **kwargs)
    finally:
        torch._dynamo.reset()
        torch.distributions.Distribution.set_default_validate_args(checks)


def torch_function_mode_count() -> int:
    """How many torch-function modes are active (cheap: one C call)."""
    return torch._C._len_torch_function_stack()


def torch_function_modes() -> list[Any]:
    """The torch-function modes active now, innermost last."""
    return list(_get_current_function_mode_stack())


def dense_fw_metadata(jd) -> Any:
    """AOTAutograd's ViewAndMutationMeta of the graph it traced: with tensor subclasses,
    the one computed on their inner tensors (SubclassMeta.fw_metadata), which lines up
    with the graph's placeholders; else the only one."""
    subclass_meta = jd._aot_graph_capture.maybe_subclass_meta
    return jd._aot_state.fw_metadata if subclass_meta is None else subclass_meta.fw_metadata


def mutation_is_shallow_copy_data(info) -> bool:
    """InputAliasInfo.mutation_is_shallow_copy_data (torch 2.14 on): the input's storage
    swap was traced from `aten.shallow_copy_data_` (a `.data` assignment), which AOTAutograd
    replays with that op rather than `set_`. Earlier torches have neither flag nor op."""
    return getattr(info, "mutation_is_shallow_copy_data", False)


def has_shallow_copy_data() -> bool:
    """Whether this torch has `aten.shallow_copy_data_` (2.14 on) to replay such a swap."""
    return hasattr(torch.ops.aten, "shallow_copy_data_")


def grad_input_metas(jd) -> list[tuple[Any, Any]]:
    """(input descriptor, how AOTAutograd rebuilds its gradient) per traced input; empty
    without subclasses or for an inference graph."""
    subclass_meta = jd._aot_graph_capture.maybe_subclass_meta
    if subclass_meta is None or subclass_meta.grad_input_metas is None:
        return []
    return list(zip(jd._aot_state.flat_args_descs, subclass_meta.grad_input_metas))


def reference_metadata(fn, flat_args: list):
    """AOTAutograd's own mutation/alias analysis of `fn(*flat_args)`.

    An independent path to the same facts capture records (used by the tests to check
    aotc's metadata against torch's). `flat_args` are real tensors; they are faked here
    so nothing is mutated.
    """
    mode = _private("FakeTensorMode")()
    fake_args = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in flat_args]
    plain = _private("PlainAOTInput")
    descs = [plain(i) for i in range(len(fake_args))]
    with mode:
        return _private("run_functionalized_fw_and_collect_metadata")(
            fn, flat_args_descs=descs, keep_input_mutations=False
        )(*fake_args)


def onnx_unsupported_ops(graph) -> list[str]:
    """Operators in an FX graph that torch.onnx's op registry cannot translate (runtime
    assertions, which the exporter drops before translating, are not among them)."""
    from torch.onnx._internal.exporter._registration import ONNXRegistry  # torch.onnx: only for ONNX exports

    registry = ONNXRegistry.from_torchlib()
    return sorted({
        str(n.target) for n in graph.nodes
        if n.op == "call_function" and isinstance(n.target, OpOverload) and not registry.is_registered(n.target)
        and not n.target.name().startswith(("aten::_assert", "aten::sym_constrain_range"))
    })


def unbacked_sizes(program) -> list[str]:
    """The data-dependent size symbols (u0, ...) anywhere in a program's graph."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols  # capture only

    found: set[str] = set()
    for node in program.graph.nodes:
        val = node.meta.get("val")
        if isinstance(val, (torch.Tensor, torch.SymInt, torch.SymBool, torch.SymFloat)):
            found |= {str(s) for s in free_unbacked_symbols(val)}
    return sorted(found)


def export_load(source) -> Any:
    """torch.export.load, and where it refuses a program torch.export.save wrote ("expected
    no unbacked symbols"), once more with its shape environment learning no equalities from
    the graph's own size assertions.

    The refusal is a torch bug: a graph asserting a data-dependent size equal to a constant
    (BART's classification head: `unique_consecutive(eos.sum(1)).numel() == 1`) makes the
    loader replace the size's symbol u0 by 1 while it replays the assertion, and then it
    finds no node that binds u0. The program torch.export made had no such replacement, and
    the assertion stays a node of the graph that checks every call; so the loader is run as
    export left things, only for the programs it refuses otherwise (a retrace of the loaded
    program knows less about those sizes, never something false)."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv  # loading an fx graph traces nothing else

    try:
        return torch.export.load(source)
    except AssertionError as e:
        if "expected no unbacked symbols" not in str(e) or not hasattr(ShapeEnv, "_maybe_guard_rel"):
            raise
    if hasattr(source, "seek"):
        source.seek(0)
    original = ShapeEnv._maybe_guard_rel
    ShapeEnv._maybe_guard_rel = lambda self, expr: None
    try:
        return torch.export.load(source)
    finally:
        ShapeEnv._maybe_guard_rel = original


def fake_mode_tracing(program):
    """A tracing context with torch.export's fake mode, for AOTAutograd on a program with
    no tensor inputs (its own mode would refuse the real constants torch.export lifted)."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv  # capture only

    mode = next((n.meta["val"].fake_mode for n in program.graph.nodes if hasattr(n.meta.get("val"), "fake_mode")),
                None)
    mode = mode or _private("FakeTensorMode")(shape_env=ShapeEnv(), allow_non_fake_inputs=True)  # no tensor at all
    return tracing(TracingContext(mode))


def global_state_guard():
    """Dynamo's C++ guard on the global state now (grad mode, autocast, default dtype,
    deterministic algorithms, torch-function enablement, threads): `.check()` is one C call."""
    return GlobalStateGuard()


def tensor_guards(examples: list, sizes: list, strides: list):
    """Dynamo's C++ guard on tensors like `examples` (dtype, device, dispatch keys,
    requires_grad, and the sizes and strides not None). Its `.check(*tensors)` must be
    given tensors only: anything else crashes the process."""
    return TensorGuards(*examples, dynamic_dims_sizes=sizes, dynamic_dims_strides=strides)


def module_hooks_registered() -> Callable[[], bool]:
    """A function telling whether any global nn.Module hook is registered (the per-module
    ones are on the module)."""
    m = nn_module
    tables = (m._global_forward_hooks, m._global_forward_pre_hooks, m._global_backward_hooks,
              m._global_backward_pre_hooks, m._global_forward_hooks_always_called)
    return lambda: any(tables)


def function_apply(cls) -> Callable:
    """`cls.apply` of an autograd.Function without its Python prologue, which binds default
    arguments and unwraps dead functorch wrappers arg by arg (microseconds per call): the
    C++ apply it ends in. Only for Functions without setup_context, called outside functorch
    transforms (`functorch_active()`); `cls.apply` otherwise."""
    return super(torch.autograd.Function, cls).apply


def is_higher_order_op(target) -> bool:
    """A graph node's target that is a control-flow op (cond, while_loop, scan, map)."""
    return isinstance(target, torch._ops.HigherOrderOperator)


def is_custom_function_node(node) -> bool:
    """An autograd node of a user's torch.autograd.Function (not of torch's control flow,
    whose Functions torch.export and AOTAutograd trace as higher-order ops)."""
    forward_cls = getattr(node, "_forward_cls", None)
    return (isinstance(node, torch.autograd.function.BackwardCFunction)
            and not getattr(forward_cls, "__module__", "").startswith("torch._higher_order_ops"))


def functorch_active() -> bool:
    return torch._C._are_functorch_transforms_active()


def constraint_violation(error: BaseException) -> str | None:
    """torch.export's text for a dynamic_shapes declaration its trace could not keep (a
    UserError of type CONSTRAINT_VIOLATION); None for any other error."""
    from torch._dynamo.exc import UserError, UserErrorType  # Dynamo: capture only

    if isinstance(error, UserError) and error.error_type is UserErrorType.CONSTRAINT_VIOLATION:
        return str(error)
    return None


@contextlib.contextmanager
def shape_guards():
    """Record every shape guard torch's tracers add inside this block.

    Yields a list that fills with one `(expr, symbols, where)` per guard: the sympy
    condition, `{symbol name: (input source names, example value)}` for its free symbols,
    and `(file, line)` of the innermost frame outside torch, aotc and the standard library
    that was running when the guard was added (the model's code, or None). torch keeps
    guards without that frame; it is what tells a user which line of theirs fixed a size.
    """

    from torch.fx.experimental.symbolic_shapes import ShapeEnv  # sympy and the shape env: capture only

    skipped = (
        os.path.dirname(torch.__file__) + os.sep,
        os.path.dirname(__file__) + os.sep,  # aotc
        sysconfig.get_paths()["stdlib"] + os.sep,
        "<",  # <frozen ...>, <string>
    )
    original = ShapeEnv._log_guard
    sites: list[tuple[Any, dict[str, tuple[list[str], int | None]], tuple[str, int] | None]] = []

    def log_guard(self, prefix, g, forcing_spec):
        original(self, prefix, g, forcing_spec)
        if "suppressed" in prefix:
            return
        sources: dict[str, list[str]] = {}
        for name, sym in self.source_to_var.items():
            sources.setdefault(str(sym), []).append(name)
        hints = self.backed_var_to_val
        symbols = {
            str(s): (sources.get(str(s), []), int(hints[s]) if s in hints else None) for s in g.free_symbols
        }
        frame, where = sys._getframe(1), None
        while frame is not None:
            if not frame.f_code.co_filename.startswith(skipped):
                where = (frame.f_code.co_filename, frame.f_lineno)
                break
            frame = frame.f_back
        del frame
        sites.append((g, symbols, where))

    ShapeEnv._log_guard = log_guard
    try:
        yield sites
    finally:
        ShapeEnv._log_guard = original


def mark_optimizer_stepped(optimizer) -> None:
    """Tell LR schedulers that `optimizer` took a step (a joint bundle's train_step ran its
    update inside the graph): torch's LRScheduler reads this flag, set by the wrapper it
    puts around optimizer.step, to warn about a scheduler stepped before its optimizer."""
    optimizer._opt_called = True


# torch's tracing kernels, as eager runs them, in a module of their own (imported by name here)
from aotc._torch_compat.kernels import eager_dropout, eager_rnn, random_draws_kept  # noqa: E402

# AOTInductor and inductor's freezing, in a module of their own (imported by name here)
from aotc._torch_compat.inductor import (  # noqa: E402
    aoti_package_loader,
    inductor_cpp_compiler,
    inductor_cpu_isa,
    inductor_freezing_on,
    inductor_random_as_eager,
    linear_post_ops_unfused,
    record_constant_folding,
    tail_safe_tiling,
)
