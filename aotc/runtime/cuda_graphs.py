"""CUDA-graph replay of compiled packages (`aotc.load(..., cuda_graphs=True)`).

A small model on a GPU spends more time launching kernels than running them. A CUDA
graph records one run of a compiled package's kernels and replays them with a single
launch. The recording holds fixed addresses, so each replay:

- copies the call's user inputs (and a backward graph's saved activations, and a joint
  step's hyperparameters) into the recording's own input tensors;
- reads parameters, buffers, optimizer state and constants in place: they live in the
  module, so their addresses hold, and a joint step's package writes its updates into
  them. A call where one of them moved (a new tensor assigned) records again;
- returns copies of the recording's outputs, which the next replay overwrites.

Each package is loaded single-threaded (AOTInductor's `run_single_threaded`: no per-run
CUDA events, which capture does not allow) and recorded once per input signature (sizes,
strides, dtypes), its first call running unrecorded. A replay is correct only where a
recording is; so loading refuses, by name (CudaGraphError), what cannot be recorded
faithfully: a device other than CUDA, a graph that draws random numbers (the recording
would replay the random stream's place, not eager's draws), and at call time a CPU
tensor among the package's inputs or a new input signature past `max_shapes`
recordings (a dynamic shape whose every size would be recorded).

Not thread-safe in the sense of concurrent replays: one lock serialises them, as a
recording's input and output tensors are shared.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import torch

from aotc.errors import CudaGraphError

# graph inputs that live in the loaded module, read (and written) in place by a replay
FIXED_ROLES = frozenset({"parameter", "buffer", "optimizer_state", "constant"})
MAX_SHAPES = 8  # recordings per package: each holds its own activations' memory


@dataclass(frozen=True)
class CudaGraphOptions:
    """How a loaded module replays its packages: at most `max_shapes` recordings per
    graph kind, and one shared memory pool (the kinds run one after another)."""

    max_shapes: int = MAX_SHAPES
    pool: tuple = field(default_factory=lambda: torch.cuda.graph_pool_handle())
    stream: torch.cuda.Stream = field(default_factory=torch.cuda.Stream)


def options_for(setting, device: torch.device, backend: str, random_ops: dict[str, list[str]],
                path: str) -> CudaGraphOptions | None:
    """The replay options `aotc.load`'s `cuda_graphs=` asks for (False/None: none; True; or
    an int, the recordings per graph kind), or CudaGraphError naming why they cannot hold."""
    if setting is None or setting is False:
        return None
    if setting is True:
        max_shapes = MAX_SHAPES
    elif isinstance(setting, int) and setting >= 1:
        max_shapes = setting
    else:
        raise CudaGraphError(f"cuda_graphs must be True, False or a number of recordings >= 1, not {setting!r}.")
    if backend != "aoti":
        raise CudaGraphError(f"cuda_graphs=True replays compiled packages; backend '{backend}' has none. "
                             "Load with backend='aoti' (aotc compile BUNDLE --device cuda first).")
    drawn = {kind: ops for kind, ops in random_ops.items() if ops}
    if drawn:
        kind, ops = next(iter(drawn.items()))
        raise CudaGraphError(
            f"Bundle '{path}': the {kind} graph draws random numbers ({', '.join(ops)}); a CUDA graph would "
            "replay the recording's place in the random stream, not eager's draws. Load it without "
            "cuda_graphs, or export the model deterministic (eval-mode dropout)."
        )
    if device.type != "cuda":
        raise CudaGraphError(f"cuda_graphs=True records CUDA kernels; this module is loaded for '{device}'. "
                             "Load it with device='cuda'.")
    return CudaGraphOptions(max_shapes=max_shapes)


def _signature(t) -> tuple | None:
    """What a recording fixes of one copied input; None for an input the package takes as None."""
    return None if t is None else (t.shape, t.stride(), t.dtype, t.device)


def _shapes(key: tuple) -> list:
    return [None if k is None else tuple(k[0]) for k in key]


@dataclass
class _Recording:
    graph: torch.cuda.CUDAGraph
    inputs: list[torch.Tensor]  # the package's inputs as recorded
    fixed: tuple[int, ...]  # data pointers of the fixed inputs, as recorded
    outputs: list


class CudaGraphRun:
    """A package's run (over a list of tensors, returning a list), recorded per input
    signature and replayed. `roles` names each package input's role (the signature's)."""

    def __init__(self, run, roles: list[str], options: CudaGraphOptions, what: str):
        self._run = run
        self._fixed = [i for i, r in enumerate(roles) if r in FIXED_ROLES]
        self._copied = [i for i, r in enumerate(roles) if r not in FIXED_ROLES]
        self._options = options
        self._what = what  # "the inference graph of bundle '...'", for messages
        self._recordings: dict[tuple, _Recording] = {}
        self._lock = threading.Lock()

    def __call__(self, args: list) -> list:
        copied = self._copied
        key = tuple(_signature(args[i]) for i in copied)
        fixed = tuple(args[i].data_ptr() for i in self._fixed)
        with self._lock:
            rec = self._recordings.get(key)
            if rec is None or rec.fixed != fixed:
                return self._first_run(args, key, fixed)
            for i in copied:
                if args[i] is not None:
                    rec.inputs[i].copy_(args[i])
            rec.graph.replay()
            return [o.clone() if isinstance(o, torch.Tensor) else o for o in rec.outputs]

    def _first_run(self, args: list, key: tuple, fixed: tuple) -> list:
        """Run unrecorded (this call's result; it also loads the package's kernels),
        then record the signature for the calls after it."""
        cpu = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.device.type != "cuda"]
        if cpu:
            raise CudaGraphError(
                f"input {cpu[0]} of {self._what} is a tensor on {args[cpu[0]].device}; a CUDA graph replays "
                "kernels on CUDA memory alone. Give every input on the module's CUDA device, or load without "
                "cuda_graphs."
            )
        if key not in self._recordings and len(self._recordings) >= self._options.max_shapes:
            shapes = ", ".join(str(_shapes(k)) for k in list(self._recordings)[:3])
            raise CudaGraphError(
                f"{self._what} has recorded {len(self._recordings)} input shapes ({shapes}, ...), its limit; "
                f"this call's {_shapes(key)} would be another. A CUDA graph holds fixed sizes: "
                "pad inputs to the sizes recorded, load with cuda_graphs=N for more recordings, or without "
                "cuda_graphs for a dynamic shape."
            )
        result = self._run(list(args))
        self._recordings[key] = self._record(args, fixed)
        return result

    def _record(self, args: list, fixed: tuple) -> _Recording:
        inputs = list(args)
        for i in self._copied:
            a = args[i]
            if a is not None:
                inputs[i] = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device).copy_(a)
        o = self._options
        device = next(a.device for a in args if isinstance(a, torch.Tensor))
        with torch.cuda.stream(o.stream):  # cuBLAS's workspace for the recording stream, made outside it
            torch.mm(torch.ones(1, 1, device=device), torch.ones(1, 1, device=device))
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, pool=o.pool, stream=o.stream):
                outputs = self._run(list(inputs))
        except RuntimeError as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise CudaGraphError(
                f"{self._what} could not be recorded as a CUDA graph ({first}): its compiled code does something "
                "a recording cannot hold, such as a copy to the CPU or a size read from a tensor's values. "
                "Load it without cuda_graphs."
            ) from e
        return _Recording(graph, inputs, fixed, outputs)
