"""A regional bundle on disk (see aotc.tools.regions for how export builds one), and how a model runs it.

    regions.json          RegionsManifest: regions, groups, the graph-break report, files
    weights.safetensors   every region's weights except each group's first, by full FQN
    groups/<g>/           an ordinary aotc bundle per group of identical regions

`RegionalBundle.open` checks regions.json, its files' hashes and each group's bundle;
`apply(bundle, model)` swaps each region of `model` for a loaded module running its
group's graphs with its weights (checked against the model's submodule first) and
returns the model. Export lives in aotc.tools.regions, a layer above: it captures and
verifies, which reading a bundle never needs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import torch

from aotc.bundle.archives import load_safetensors, read_json_file
from aotc.bundle.files import SIGNATURE_FILE, Bundle, check_rel_path, manifest_checksum, sha256_file
from aotc.bundle.regions_schema import RegionsManifest, TensorSpec
from aotc.bundle.schema import FileEntry, from_json, to_json
from aotc.bundle.signing import require_signature, tell_native_code_trusted
from aotc.contract.subclasses import check_trust
from aotc.devices import resolve_device
from aotc.errors import BundleError, RegionError
from aotc.exporters import formats
from aotc.runtime import check_mode
from aotc.runtime.module import LoadedModule

REGIONS = "regions.json"
WEIGHTS = "weights.safetensors"


def is_regional(path: str | Path) -> bool:
    return (Path(path) / REGIONS).is_file()


def tensor_spec(t: torch.Tensor) -> TensorSpec:
    """A region's record of one weight: shape and dtype (checked against the model at apply)."""
    return TensorSpec(shape=list(t.shape), dtype=str(t.dtype).removeprefix("torch."))


def module_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Parameters and buffers by name."""
    return {**dict(module.named_parameters()), **dict(module.named_buffers())}


def copy_weights(loaded: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """A region's own weights into the module running its group's graphs."""
    own = module_state(loaded)
    with torch.no_grad():
        for name, t in state.items():
            own[name].copy_(t)


def file_entry(root: Path, rel: str, kind: str) -> FileEntry:
    """regions.json's entry for the file at `rel`: its size and sha256."""
    path = root / rel
    return FileEntry(path=rel, kind=kind, size=path.stat().st_size, sha256=sha256_file(path))


def update_groups(path: str | Path, update) -> RegionalBundle:
    """Apply `update(group_path)` (compile, add ONNX) to every group's bundle, then record
    the groups' new manifests in regions.json (written to a temporary file and renamed
    over it, so a reader sees the old or the new one)."""
    rb = RegionalBundle.open(path)
    (rb.path / SIGNATURE_FILE).unlink(missing_ok=True)  # it would not cover the new files: sign again
    for group in rb.manifest.groups:
        update(rb.path / group.path)
    rel = {f"{g.path}/manifest.json" for g in rb.manifest.groups}
    files = [file_entry(rb.path, e.path, e.kind) if e.path in rel else e for e in rb.manifest.files]
    raw = to_json(dataclasses.replace(rb.manifest, files=files, checksum=""))
    raw["checksum"] = manifest_checksum(raw)
    tmp = rb.path / f".{REGIONS}.tmp"
    tmp.write_text(json.dumps(raw, indent=2) + "\n")
    os.replace(tmp, rb.path / REGIONS)
    return RegionalBundle.open(path)


# --------------------------------------------------------------------------- reading


@dataclass
class RegionalBundle:
    """A regional bundle, checked: regions.json, its files' hashes, and each group's bundle."""

    path: Path
    manifest: RegionsManifest
    groups: dict[str, Bundle]

    @classmethod
    def open(cls, path: str | Path) -> RegionalBundle:
        root = Path(path)
        raw = read_json_file(root / REGIONS, f"{root}/{REGIONS}")
        manifest = from_json(RegionsManifest, raw, f"{root}/{REGIONS}")
        if manifest.checksum != manifest_checksum(raw):
            raise BundleError(f"Bundle '{root}': {REGIONS} does not match its checksum; it was changed or damaged.")
        listed = {e.path: e for e in manifest.files}
        for entry in manifest.files:
            check_rel_path(entry.path, f"{root}/{REGIONS}")
            target = root / entry.path
            if target.is_symlink() or not target.is_file() or target.stat().st_size != entry.size \
                    or sha256_file(target) != entry.sha256:
                raise BundleError(f"Bundle '{root}': {entry.path} is missing or not the file {REGIONS} lists.")
        group_dirs = {g.path for g in manifest.groups}
        for g in manifest.groups:
            check_rel_path(g.path, f"{root}/{REGIONS}")
            if f"{g.path}/manifest.json" not in listed:
                raise BundleError(f"Bundle '{root}': group '{g.name}' has no manifest listed in {REGIONS}.")
        for dirpath, dirnames, filenames in os.walk(root):
            rel_dir = Path(dirpath).relative_to(root).as_posix()
            if any(rel_dir == d or rel_dir.startswith(d + "/") for d in group_dirs):
                continue  # the group's own Bundle.open checks its files
            for name in dirnames + filenames:
                rel = f"{rel_dir}/{name}" if rel_dir != "." else name
                if stat.S_ISLNK(os.lstat(Path(dirpath) / name).st_mode):
                    raise BundleError(f"Bundle '{root}': '{rel}' is a symbolic link.")
                if name in filenames and rel not in (REGIONS, SIGNATURE_FILE, *listed):
                    raise BundleError(f"Bundle '{root}': '{rel}' is not listed in {REGIONS}.")
                if name in dirnames and rel not in group_dirs and not any(d.startswith(rel + "/") for d in group_dirs):
                    raise BundleError(f"Bundle '{root}': folder '{rel}' is not a group of {REGIONS}.")
        groups = {g.name: Bundle.open(root / g.path) for g in manifest.groups}
        names = set(groups)
        for r in manifest.regions:
            if r.group not in names:
                raise BundleError(f"Bundle '{root}': region '{r.fqn}' names group '{r.group}', which it does not have.")
        return cls(root, manifest, groups)

    def weights(self) -> dict[str, torch.Tensor]:
        if not any(e.path == WEIGHTS for e in self.manifest.files):
            return {}
        return load_safetensors(self.path / WEIGHTS)


# --------------------------------------------------------------------------- apply


def apply(path: str | Path, model: torch.nn.Module, *, backend: str = "auto", device=None, mode: str | None = None,
          trusted_subclasses=(), public_keys=None) -> torch.nn.Module:
    """Swap each region of `model` for a module running its group's graphs (with that
    region's weights from the bundle) and return `model`. Every region is checked
    against the model's submodule first: its class and weight names and shapes.
    `public_keys`: as for aotc.load (one signature covers the regional bundle's every file)."""

    signed = require_signature(path, public_keys)
    rb = RegionalBundle.open(path)
    mode = mode or ("train" if model.training else "eval")
    device = resolve_device(device)
    targets = {}
    for r in rb.manifest.regions:  # check everything before changing anything
        try:
            sub = model.get_submodule(r.fqn)
        except AttributeError:
            raise RegionError(f"{type(model).__name__} has no submodule '{r.fqn}', a region of '{rb.path}'.") from None
        if type(sub).__qualname__ != r.class_name:
            raise RegionError(f"'{r.fqn}' is a {type(sub).__qualname__}; the bundle's region is a {r.class_name}.")
        for kind, expected, actual in (("parameters", r.parameters, dict(sub.named_parameters())),
                                       ("buffers", r.buffers, dict(sub.named_buffers()))):
            found = {n: tensor_spec(t) for n, t in actual.items()}
            if found != expected:
                diff = sorted(set(found) ^ set(expected)) or sorted(n for n in found if found[n] != expected[n])
                raise RegionError(f"the {kind} of '{r.fqn}' differ from the bundle's region ({', '.join(diff)}): "
                                  "the model is not the one the bundle was exported from.")
        targets[r.fqn] = sub
    stored = rb.weights()
    graphs = {}
    for name, bundle in rb.groups.items():
        check_mode(bundle, mode)
        check_trust(bundle.metadata.subclasses, trusted_subclasses)
        chosen = backend
        if chosen == "auto":
            chosen = "aoti" if formats.get("aoti").has_artifacts(bundle, device) else "fx"
        if chosen == "aoti" and signed is None:
            tell_native_code_trusted(rb.path)
        graphs[name] = (chosen, {k: formats.get(chosen).load_graph(bundle, k, device) for k in bundle.graph_kinds})
    for r in rb.manifest.regions:
        bundle = rb.groups[r.group]
        chosen, group_graphs = graphs[r.group]
        loaded = LoadedModule(bundle, group_graphs, device, mode, chosen, trusted_subclasses)
        group = next(g for g in rb.manifest.groups if g.name == r.group)
        if r.fqn != group.first:
            try:
                copy_weights(loaded, {n: stored[f"{r.fqn}.{n}"].to(device) for n in [*r.parameters, *r.buffers]})
            except KeyError as e:
                raise BundleError(f"Bundle '{rb.path}': {WEIGHTS} has no {e} for region '{r.fqn}'.") from None
        parent_name, _, child = r.fqn.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, loaded)
    return model
