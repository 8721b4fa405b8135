"""Regional bundles: the submodules of a model that can be captured, when the model
cannot be captured whole; the user's own Python between them stays Python.

    regions.json          RegionsManifest: regions, groups, the graph-break report, files
    weights.safetensors   every region's weights except each group's first, by full FQN
    groups/<g>/           an ordinary aotc bundle per group of identical regions

Export records each submodule's inputs from one eager run (forward hooks), picks the
regions (`"auto"`: the largest submodules with weights that capture cleanly, top
down; or an fnmatch pattern over FQNs), and groups regions that trace to the same
graphs: same class, weight names and shapes, and inputs. A group is captured once,
from its first region; every other region of it must then reproduce its own eager
outputs through the group's graphs with its own weights, or it gets a group of its
own. So a stack of identical blocks compiles one block.

Reading a regional bundle and running it (`RegionalBundle`, `apply`) live in
aotc.runtime.regional, a layer below: verify and load need them, never export.
"""

from __future__ import annotations

import copy
import fnmatch
import inspect
import json
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch.export import Dim

from aotc import __version__, load
from aotc._torch_compat import pytree
from aotc.api import export
from aotc.bundle.files import check_target, check_writable, manifest_checksum, staging_dir
from aotc.bundle.regions_schema import Region, RegionGroup, RegionsManifest
from aotc.bundle.schema import FORMAT_VERSION, ModelInfo, to_json
from aotc.capture.breaks import report
from aotc.capture.dynamic_shapes import user_dynamic_shapes
from aotc.capture.module_copy import copy_module
from aotc.contract.randomness import callers_random_state_kept
from aotc.errors import CaptureError, InputError, RegionError
from aotc.runtime.regional import (  # noqa: F401 (public here before)
    REGIONS,
    WEIGHTS,
    RegionalBundle,
    apply,
    copy_weights,
    file_entry,
    is_regional,
    module_state,
    tensor_spec,
    update_groups,
)
from aotc.sources.model_file import split_inputs
from aotc.tools.observe import clone_tree


@dataclass
class _Call:
    """A submodule's first call in the recording run; `later`: its further calls there
    with inputs of other shapes (one per shape: a region must replay each)."""

    args: tuple
    kwargs: dict
    output: Any
    later: list[_Call] = field(default_factory=list)


def _shapes(args: tuple, kwargs: dict) -> tuple:
    leaves, spec = pytree.tree_flatten((args, kwargs))
    return str(spec), tuple(tuple(x.shape) if isinstance(x, torch.Tensor) else repr(x) for x in leaves)


def _record_calls(model: torch.nn.Module, args: tuple, kwargs: dict, grad: bool = False) -> dict[str, _Call]:
    """Every submodule's inputs and outputs at its first call (and at later calls with
    inputs of other shapes), from one eager run of a copy; with `grad`, under grad mode,
    so inputs require grad as in training."""

    twin = copy.deepcopy(model)  # the run may update buffers (BatchNorm); the user's model stays as it was
    calls: dict[str, _Call] = {}
    handles = []
    for fqn, module in twin.named_modules():
        if not fqn:
            continue

        def hook(module, a, k, out, fqn=fqn):
            first = calls.get(fqn)
            if first is None:
                calls[fqn] = _Call(*clone_tree((a, k)), output=clone_tree(out))
            elif all(_shapes(a, k) != _shapes(c.args, c.kwargs) for c in (first, *first.later)):
                first.later.append(_Call(*clone_tree((a, k)), output=clone_tree(out)))

        handles.append(module.register_forward_hook(hook, with_kwargs=True))
    try:
        with torch.set_grad_enabled(grad):
            twin(*clone_tree(args), **clone_tree(kwargs))
    finally:
        for h in handles:
            h.remove()
    return calls


def _key(module: torch.nn.Module, call: _Call) -> tuple:
    """What regions that may share graphs have in common (checked further by running)."""
    leaves, spec = pytree.tree_flatten((call.args, call.kwargs))
    inputs = tuple((tuple(x.shape), x.dtype, x.requires_grad) if isinstance(x, torch.Tensor) else repr(x) for x in leaves)
    weights = tuple((n, tuple(t.shape), t.dtype) for n, t in module_state(module).items())
    return (type(module), module.training, str(spec), inputs, weights)


def _reproduces(group_bundle: Path, module: torch.nn.Module, calls: list[_Call], mode: str) -> bool:
    """Whether the group's graphs, with `module`'s weights, give each call's recorded outputs
    (an input the bundle refuses, a size it was not exported for, is a no)."""

    loaded = load(group_bundle, backend="fx", mode=mode, public_keys=())  # export's own, not yet signed
    copy_weights(loaded, module_state(module))
    for call in calls:
        try:
            with torch.no_grad():
                out = loaded(*clone_tree(call.args), **clone_tree(call.kwargs))
        except InputError:
            return False
        got, want = pytree.tree_leaves(out), pytree.tree_leaves(call.output)
        if len(got) != len(want) or not all(
            isinstance(g, torch.Tensor) and g.shape == w.shape and g.dtype == w.dtype
            and torch.allclose(g.double(), w.double(), rtol=1e-4, atol=1e-5, equal_nan=True)
            for g, w in zip(got, want)
        ):
            return False
    return True


def _shorter_inputs(model: torch.nn.Module, args: tuple, kwargs: dict, dynamic_shapes) -> tuple | None:
    """The example inputs with every declared dynamic dim one shorter, so a second
    recording run shows which dims of each region's inputs follow them; None if none."""

    spec = user_dynamic_shapes(model, args, kwargs, dynamic_shapes)
    if spec is None:
        return None

    def shorter(t, dims):
        if isinstance(t, torch.Tensor) and isinstance(dims, dict):
            for d in dims:
                if t.shape[d] > 1:
                    t = t.narrow(d, 0, t.shape[d] - 1)
        return t

    return (tuple(shorter(a, s) for a, s in zip(args, spec["args"])),
            {k: shorter(v, spec["kwargs"].get(k)) for k, v in kwargs.items()})


def _region_dynamic_shapes(module: torch.nn.Module, call: _Call, others: list[_Call]) -> dict | None:
    """dynamic_shapes for a region: the dims of its inputs that differ between its first call
    and `others` (the same call in the shorter recording run, its later calls of other shapes;
    Dim.AUTO: export finds their ranges and relations)."""

    spec: dict[str, dict] = {}
    for other in others:
        try:
            now = inspect.signature(module.forward).bind(*call.args, **call.kwargs).arguments
            then = inspect.signature(module.forward).bind(*other.args, **other.kwargs).arguments
        except TypeError:
            return None
        for name, value in now.items():
            before = then.get(name)
            if isinstance(value, torch.Tensor) and isinstance(before, torch.Tensor) and value.dim() == before.dim():
                for d in range(value.dim()):
                    if value.shape[d] != before.shape[d]:
                        spec.setdefault(name, {})[d] = Dim.AUTO
    return spec or None


def _candidates(model: torch.nn.Module, calls: dict[str, _Call], regions: str) -> list[str]:
    """FQNs for `regions` (a pattern), top-most first and none inside another."""
    chosen: list[str] = []
    for fqn, _ in model.named_modules():
        if fqn and fnmatch.fnmatchcase(fqn, regions) and not any(fqn.startswith(c + ".") for c in chosen):
            if fqn not in calls:
                raise RegionError(f"submodule '{fqn}' matches --regions '{regions}' but forward never calls it.")
            chosen.append(fqn)
    if not chosen:
        names = ", ".join(f for f, _ in list(model.named_modules())[1:8])
        raise RegionError(f"no submodule of {type(model).__name__} matches --regions '{regions}' (it has {names}, ...).")
    return chosen


@callers_random_state_kept()
def export_regions(model: torch.nn.Module, example_inputs: Any, out: str | Path, regions: str = "auto",
                   graphs: tuple[str, ...] = ("inference",), *, dynamic_shapes=None, train: bool = False,
                   force: bool = False, name: str | None = None, source: str | None = None,
                   on_region=None) -> RegionalBundle:
    """Export the submodules of `model` given by `regions` ("auto", or an fnmatch pattern
    over FQNs such as "blocks.*") as a regional bundle at `out`. `dynamic_shapes` (the
    whole model's, in torch.export's format) makes dynamic the dims of each region's
    inputs that follow the model's dynamic dims."""

    if tuple(graphs) not in (("inference",), ("forward", "backward")):
        raise RegionError("regions take inference or forward+backward graphs; a region has no loss for a joint graph.")
    out = Path(out)
    check_target(out, force)
    check_writable(out)
    args, kwargs = split_inputs(example_inputs, "example_inputs")
    model.train(train or graphs != ("inference",))
    training = graphs != ("inference",)
    calls = _record_calls(model, args, kwargs, grad=training)
    shorter = _shorter_inputs(model, args, kwargs, dynamic_shapes)
    shorter_calls = _record_calls(model, *shorter) if shorter is not None else {}
    mode = "eval" if graphs == ("inference",) else "train"
    with torch.no_grad():
        try:
            breaks = report(copy_module(model), args, kwargs)
        except Exception:  # the report is a help, not a requirement
            breaks = []

    with staging_dir(out, force) as root:
        groups: list[tuple[RegionGroup, tuple]] = []
        placed: list[Region] = []
        others: dict[str, torch.Tensor] = {}

        def place(fqn: str, module: torch.nn.Module) -> bool:
            """Put `fqn` in a group (capturing a new one if needed); False if it cannot be captured."""
            call = calls[fqn]
            key = _key(module, call)
            for group, gkey in groups:
                if gkey == key and _reproduces(root / group.path, module, [call, *call.later], mode):
                    others.update({f"{fqn}.{n}": t.detach() for n, t in module_state(module).items()})
                    placed.append(_region(fqn, module, group.name))
                    return True
            group = RegionGroup(name=f"g{len(groups)}", path=f"groups/g{len(groups)}", first=fqn)
            if on_region:
                on_region(fqn)
            other_calls = [c for c in (shorter_calls.get(fqn), *call.later) if c is not None]
            try:
                export(module, (call.args, call.kwargs), root / group.path, graphs=graphs, train=module.training,
                       name=fqn, source=source, dynamic_shapes=_region_dynamic_shapes(module, call, other_calls))
            except CaptureError:
                return False
            if not _reproduces(root / group.path, module, [call, *call.later], mode):
                # it cannot take the region's calls (a torch.Size argument, a constant to the graph,
                # is no input of the bundle; another call's shapes): its children may
                shutil.rmtree(root / group.path)
                return False
            groups.append((group, key))
            placed.append(_region(fqn, module, group.name))
            return True

        if regions == "auto":
            def visit(prefix: str, module: torch.nn.Module) -> None:
                for child_name, child in module.named_children():
                    fqn = f"{prefix}.{child_name}" if prefix else child_name
                    has_weights = any(True for _ in module_state(child).values())
                    if not has_weights:
                        continue  # nothing to compile worth a region; it stays Python
                    if fqn in calls and place(fqn, child):
                        continue
                    visit(fqn, child)

            visit("", model)
            if not placed:
                raise RegionError(f"no submodule of {type(model).__name__} with weights can be captured.")
        else:
            for fqn in _candidates(model, calls, regions):
                if not place(fqn, model.get_submodule(fqn)):
                    raise CaptureError(f"region '{fqn}' cannot be captured; see `aotc export` of it alone for why.")

        files = []
        if others:

            save_file({k: v.contiguous().clone() for k, v in others.items()}, str(root / WEIGHTS))
            files.append(file_entry(root, WEIGHTS, "weights"))
        files += [file_entry(root, f"{g.path}/manifest.json", "other") for g, _ in groups]
        manifest = RegionsManifest(
            format_version=FORMAT_VERSION, aotc_version=__version__, torch_version=torch.__version__,
            created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            model=ModelInfo(name=name or type(model).__name__.lower(), source=source,
                            class_name=type(model).__name__, training=model.training,
                            num_parameters=sum(p.numel() for p in model.parameters())),
            graph_kinds=list(graphs), regions=placed, groups=[g for g, _ in groups],
            breaks=breaks, files=files,
        )
        raw = to_json(manifest)
        raw["checksum"] = manifest_checksum(raw)
        (root / REGIONS).write_text(json.dumps(raw, indent=2) + "\n")
    return RegionalBundle.open(out)


def _region(fqn: str, module: torch.nn.Module, group: str) -> Region:
    return Region(
        fqn=fqn, class_name=type(module).__qualname__, group=group,
        parameters={n: tensor_spec(p) for n, p in module.named_parameters()},
        buffers={n: tensor_spec(b) for n, b in module.named_buffers()},
    )
