"""The `aoti` format's compiling, its cache, and the checks a compiled graph needs.

Results are cached under a content hash of the graph, the compile options, the device,
the torch version, the compiler and the CPU's flags, so compiling an unchanged model
again copies the earlier artifact instead of running the C++ compiler. A graph whose
replay needs view strides only the fx graph knows is refused before compiling.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

import torch
from torch.export.passes import move_to_device_pass

from aotc import _torch_compat as tc
from aotc.bundle.files import Bundle
from aotc.bundle.fingerprint import build_fingerprint, cpu_flags
from aotc.contract.aliasing import StrideGuard, dense_strides
from aotc.errors import AotcError
from aotc.exporters import aoti_profiles
from aotc.exporters.graph_inputs import example_graph_inputs
from aotc.profiles import Profile


def graph_content_hash(path: Path) -> str:
    """sha256 of the program inside a .pt2 archive, leaving out the archive's random
    serialization id, so two exports of the same model hash alike."""

    digest = hashlib.sha256()
    with zipfile.ZipFile(path) as archive:
        for name in sorted(n for n in archive.namelist() if "/models/" in n):
            digest.update(name.split("/", 1)[1].encode())
            digest.update(archive.read(name))
    return digest.hexdigest()


# Inductor options that shape the artifact; part of the compile cache key.
# fallback_random: random ops (dropout) call eager's kernels, so under the same seed a
# compiled bundle draws the same masks as eager instead of inductor's own RNG stream.
# emulate_precision_casts: a value eager rounds to bfloat16 or float16 is rounded in the
# compiled code too; inductor otherwise keeps a fused kernel's intermediates in float32
# (Kandinsky 5's rotary embedding rounds through bfloat16: 3.8e-4 off eager without it).
COMPILE_OPTIONS: dict[str, object] = {"fallback_random": True, "emulate_precision_casts": True}


def compile_options(device: torch.device) -> dict[str, object]:
    """COMPILE_OPTIONS for a graph that takes its weights as inputs on `device`.

    On CPU, inductor's layout optimization (channels-last convolutions) converts every
    convolution weight and activation on every call when the weights are inputs, not
    constants: resnet18's SGD step took 195 ms with it and 120 ms without (eager 113 ms),
    its unfolded inference 33 ms against 25 ms. Frozen and folded graphs keep it (their
    weights are converted once; the same 23 ms either way)."""
    if device.type == "cpu":
        return {**COMPILE_OPTIONS, "layout_optimization": False}
    return dict(COMPILE_OPTIONS)


# Bumped whenever aotc changes a graph before handing it to AOTInductor, or how inductor
# compiles it (4: tc.tail_safe_tiling), so artifacts cached by an older aotc are not reused.
PIPELINE_VERSION = 4


def cache_key(graph_hash: str, kind: str, device: torch.device, options: dict) -> str:
    """Content hash of everything that decides the compiled code (cheap to compute: no
    compiler or CPU probing)."""
    parts = {
        "graph": graph_hash,
        "pipeline": PIPELINE_VERSION,
        "kind": kind,
        "device": device.type,
        "options": options,
        "torch": torch.__version__,
        "compiler": tc.inductor_cpp_compiler(),
        "cpu_flags": sorted(cpu_flags()) if device.type == "cpu" else None,
        "cuda_arch": list(torch.cuda.get_device_capability(device)) if device.type == "cuda" else None,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def check_layouts_static(bundle: Bundle, kind: str) -> None:
    """Refuse a graph whose replay needs view strides only the fx graph knows.

    A compiled graph returns fresh tensors, so the runtime rebuilds outputs that alias an
    input or intermediate, and inputs whose shape or strides forward changes, from the
    layouts recorded at capture. With dynamic sizes those are symbolic and not recorded:
    the view would be rebuilt with the compiled output's strides, which need not be
    eager's."""
    program = bundle.metadata.programs.get(kind)
    if program is None:
        return
    plain = ("non_alias", "unsafe_view_alias", "custom_function_view")
    for out in program.outputs:
        aliased = out.output_type not in plain or out.same_as_output is not None or out.view_of_output is not None
        if aliased and out.output_type != "is_input" and out.tensor is not None and out.tensor.dynamic_dims:
            raise AotcError(
                f"output {out.index} of the {kind} graph of '{bundle.path}' is a view ({out.base}) with "
                "dynamic sizes; a compiled graph cannot give it eager's strides. Load this bundle with "
                "backend='fx', or export without dynamic dims."
            )
    for info in program.inputs:
        t = info.tensor
        always_empty = t is not None and any(size == 0 and str(d) not in t.dynamic_dims for d, size in enumerate(t.shape))
        if info.kind in ("user_input", "synthetic_base") and t is not None and t.dynamic_dims and not always_empty:
            guard = StrideGuard.of(t.shape, t.stride, static=False)
            if tuple(t.stride) != dense_strides(t.shape, guard.order):
                raise AotcError(
                    f"input '{info.name}' of the {kind} graph of '{bundle.path}' was not dense "
                    f"(stride {tuple(t.stride)}) and has dynamic sizes; a compiled graph could not be "
                    "given its layout. Export with a dense example (.contiguous()), or use backend='fx'."
                )
        if info.mutates_metadata and info.layout_after is None:
            raise AotcError(
                f"the {kind} graph of '{bundle.path}' changes the shape or strides of '{info.name}' with "
                "dynamic sizes; a compiled graph cannot replay that view. Load this bundle with "
                "backend='fx', or export without dynamic dims."
            )


def compile_cached(bundle: Bundle, kind: str, device: torch.device, target: Path, cache: Path | None,
                   compile_graph, options: dict, profile: Profile | None = None) -> tuple[dict, bool]:
    """Compile one graph into `target` with `compile_graph(program, example_inputs, target)`,
    or copy an identical earlier result from `cache`; returns (fingerprint, cached). With
    `profile`, the graph is narrowed to its sizes first (exporters/aoti_profiles.py)."""
    check_layouts_static(bundle, kind)
    if profile is not None:
        options = {**options, "profile": profile.as_build()}
    key = cache_key(graph_content_hash(bundle.graph_path(kind)), kind, device, options)
    if cache is not None:
        cached, meta = cache / f"{key}.pt2", cache / f"{key}.json"
        if cached.is_file() and meta.is_file() and package_problem(cached) is None:
            shutil.copyfile(cached, target)
            return json.loads(meta.read_text()), True

    program = bundle.exported_program(kind)
    if device.type != "cpu":

        program = move_to_device_pass(program, device)
    sizes = aoti_profiles.example_sizes(bundle, profile) if profile is not None else None
    examples = example_graph_inputs(bundle, kind, device, sizes)
    if profile is not None:
        program = aoti_profiles.narrowed(bundle, kind, program, profile, examples)
    compile_graph(program, examples, target)
    fingerprint = build_fingerprint(device) | ({"profile": profile.as_build()} if profile is not None else {})
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
        # write-then-rename: a concurrent or interrupted compile never leaves half an entry
        with tempfile.NamedTemporaryFile(dir=cache, delete=False, suffix=".tmp") as f, open(target, "rb") as src:
            shutil.copyfileobj(src, f)
        os.replace(f.name, cache / f"{key}.pt2")
        (cache / f"{key}.json.tmp").write_text(json.dumps(fingerprint))
        os.replace(cache / f"{key}.json.tmp", cache / f"{key}.json")
    return fingerprint, False


def package_problem(path: Path) -> str | None:
    """What is wrong with an AOTInductor package's metadata files, or None."""

    try:
        with zipfile.ZipFile(path) as archive:
            for name in archive.namelist():
                if name.endswith(".json"):
                    json.loads(archive.read(name) or b"?")
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        return f"{type(e).__name__} in {path.name}: {str(e).splitlines()[0] if str(e) else ''}"
    return None


def _copy_views_of_inputs(program) -> None:
    """Make every output that is a view of a graph input (not the input itself) a copy.

    AOTInductor in torch 2.13 can return such a view with the input's own strides when
    the input is returned too (e.g. a backward graph returning `tangent` and
    `tangent.t()`): a silently wrong gradient. A copy in the view's layout has the right
    values; the runtime rebuilds real views of inputs from the metadata anyway."""
    graph = program.graph_module.graph
    output = graph.find_nodes(op="output")[0]
    placeholders = set(graph.find_nodes(op="placeholder"))

    def views_an_input(node) -> bool:
        while isinstance(node, torch.fx.Node) and node not in placeholders:
            target = node.target
            if not (isinstance(target, torch._ops.OpOverload) and target.is_view):
                return False
            node = node.args[0]
        return isinstance(node, torch.fx.Node)

    copies = {}
    for node in output.all_input_nodes:
        if node not in placeholders and views_an_input(node):
            with graph.inserting_before(output):
                copy = graph.call_function(torch.ops.aten.clone.default, (node,))
            copy.meta["val"] = node.meta["val"].clone()
            copies[node] = copy
    if copies:
        output.args = torch.fx.map_arg(output.args, lambda n: copies.get(n, n))
        program.graph_module.recompile()


def compile_graph(program, example_inputs: list, package_path: Path, configs: dict) -> None:
    """AOTInductor-compile `program` (an ExportedProgram) for the device of its inputs.

    A package whose metadata does not read back (inductor's shared cache can hand out a
    file another process is still writing) is compiled once more with inductor's caches
    off; a second bad package is an error, never a bundle.
    """
    from torch._inductor import aoti_compile_and_package  # inductor: imported only to compile

    _copy_views_of_inputs(program)
    program.example_inputs = (tuple(example_inputs), {})
    try:
        for attempt in range(2):
            with torch._inductor.config.patch(force_disable_caches=attempt > 0), tc.tail_safe_tiling():
                aoti_compile_and_package(program, package_path=str(package_path), inductor_configs=dict(configs))
            problem = package_problem(package_path)
            if problem is None:
                return
        raise AotcError(f"AOTInductor wrote a package that does not read back ({problem}); compile again.")
    except AotcError:
        raise
    except Exception as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        hint = ""
        if "while_loop_stack_output" in first:  # torch 2.13: AOTInductor has no C++ for while_loop's saved steps
            hint = (" torch's AOTInductor cannot compile a while_loop that is differentiated (its forward saves "
                    "every iteration); this bundle runs on the fx backend (aotc.load(..., backend='fx')), or "
                    "export an inference graph to compile.")
        if "CppCompileError" in first:  # torch's generated code, not the model: another torch may compile it
            hint = (f" The C++ that torch {torch.__version__}'s inductor generated did not compile (a torch bug, "
                    "shown with --debug); the bundle runs on the fx backend (aotc.load(..., backend='fx')), or "
                    "compile it under another tested torch.")
        raise AotcError(f"AOTInductor could not compile the graph: {type(e).__name__}: {first}.{hint}") from e
    finally:
        program.example_inputs = None
