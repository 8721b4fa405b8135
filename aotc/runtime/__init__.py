"""Runtime: `aotc.load` replays a bundle as an nn.Module, with no tracing at load."""

from __future__ import annotations

from aotc.bundle.files import Bundle
from aotc.bundle.signing import require_signature, tell_native_code_trusted
from aotc.contract.subclasses import check_trust
from aotc.devices import resolve_device
from aotc.errors import AotcError, BundleError, ModeError
from aotc.exporters import formats
from aotc.runtime.cuda_graphs import options_for as cuda_graph_options
from aotc.runtime.module import LoadedModule

MODES = ("eval", "train")
BACKENDS = ("auto", "fx", "aoti", "onnx")  # kept for importers; load() takes formats.backends(), the registry's


def load(path, backend: str = "auto", device=None, mode: str = "eval", trusted_subclasses=(),
         public_keys=None, cuda_graphs=False, profiles: bool = True) -> LoadedModule:
    """Load the bundle at `path` as an nn.Module that behaves like the eager model.

    `mode="eval"` needs an inference graph captured in eval mode; `mode="train"` a
    forward+backward bundle (call it, then .backward()) or a joint one (`train_step`).
    `backend`: "aoti" (compiled artifacts), "fx" (the ExportedPrograms), "onnx"
    (onnxruntime), or "auto": aoti when the bundle has artifacts for the device, else fx.
    `trusted_subclasses`: tensor classes (`"module:Class"` or the class) the bundle may
    make aotc import, besides torch's and torchao's own (see aotc.contract.subclasses).
    `public_keys`: PEM files of the publishers whose signature the bundle must carry (else
    AOTC_PUBLIC_KEYS; see aotc.bundle.signing); checked before anything else is read.
    `cuda_graphs`: True (or a number of input shapes to record per graph, 8 for True) to
    replay the compiled CUDA packages as CUDA graphs (aotc.runtime.cuda_graphs); refused
    with CudaGraphError where a recording could not replay eager.
    `profiles=False`: each compiled graph runs its generic package alone, leaving its shape
    profiles' packages (aotc compile --profile) unused, e.g. to compare them.
    """
    if mode not in MODES:
        raise AotcError(f"mode must be one of {MODES}, not {mode!r}.")
    signed = require_signature(path, public_keys)
    bundle = Bundle.open(path)
    check_mode(bundle, mode)

    check_trust(bundle.metadata.subclasses, trusted_subclasses)  # before any artifact is loaded
    device = resolve_device(device)

    if backend not in formats.backends():
        raise AotcError(f"backend must be one of {', '.join(formats.backends())}, not {backend!r}.")
    if backend == "auto":
        # the compiled artifact for this device when the bundle has one, else the fx graphs
        backend = "aoti" if formats.get("aoti").has_artifacts(bundle, device) else "fx"
    extra = {}  # the aoti format's keyword: its packages replayed as CUDA graphs
    if cuda_graphs:
        drawn = {}
        if backend == "aoti":
            drawn = {kind: formats.get("aoti").drawn_random(bundle, kind, device) for kind in bundle.graph_kinds}
        extra["cuda_graphs"] = cuda_graph_options(cuda_graphs, device, backend, drawn, str(bundle.path))
    if backend == "aoti" and signed is None:
        tell_native_code_trusted(bundle.path)
    if backend == "aoti" and not profiles:
        extra["profiles"] = False
    fmt = formats.get(backend)
    graphs = {kind: fmt.load_graph(bundle, kind, device, **extra) for kind in bundle.graph_kinds}
    try:
        return LoadedModule(bundle, graphs, device, mode, backend, trusted_subclasses)
    except AotcError:
        raise
    except (KeyError, ValueError, IndexError, TypeError, AttributeError) as e:
        # bundle_check covers what it knows the runtime looks up; this names anything else
        raise BundleError(f"Bundle '{bundle.path}': its signature and metadata do not build a module "
                          f"({type(e).__name__}: {e}). The bundle is damaged; export it again.") from e


def check_mode(bundle: Bundle, mode: str) -> None:
    """The bundle has graphs for `mode` ("eval": an eval-mode inference graph; "train":
    training graphs, or an inference graph captured in train mode)."""
    if mode not in MODES:
        raise AotcError(f"mode must be one of {MODES}, not {mode!r}.")
    kinds = bundle.graph_kinds
    training = bundle.metadata.training
    if mode == "eval" and not ({"inference", "prefill"} & set(kinds) and not training):
        raise ModeError(
            f"Bundle '{bundle.path}' has only training graphs ({', '.join(kinds)}, captured in train "
            "mode); load it with mode='train', or export an inference graph for eval "
            "(aotc export MODEL -o BUNDLE)."
        )
    if mode == "train" and not ({"forward", "joint"} & set(kinds) or training):
        raise ModeError(
            f"Bundle '{bundle.path}' has only an eval-mode inference graph; load it with "
            "mode='eval', or export training graphs (graphs=(\"forward\", \"backward\") or (\"joint\",); "
            "aotc export --autograd or --joint)."
        )
