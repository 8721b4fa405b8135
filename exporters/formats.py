"""Artifact formats: the interface every exporter implements, and their registry.

A format is a module (`exporters/<format>.py`, installed as `aotc.exporters.<format>`)
with the members of `Format`. aotc reaches formats only through `get(name)`, so the
library imports no exporter by name and no exporter imports another; adding a format
means adding one module and one line in `_REGISTRY` (or calling `register`).

`fx` is the source format, written at export from the captured graphs; the others are
built from a bundle's fx graphs by `add_artifacts`, which updates the bundle atomically.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

from aotc.bundle.files import Bundle, BundleWriter, update_bundle
from aotc.devices import resolve_device, with_index
from aotc.errors import AotcError
from aotc.profiles import Profile

if TYPE_CHECKING:
    import torch

    from aotc.bundle.schema import FileKind
    from aotc.capture import Capture

Graph = Callable[..., tuple]
# on_graph(kind, device, event) with event "start", "built" or "cached"
GraphCallback = Callable[[str, str, str], None]


@dataclass(frozen=True)
class BuildOptions:
    """What a build may be asked for: an ONNX opset, where compiled results are cached,
    whether CPU inference graphs are compiled frozen with the weights folded at load
    (`fold`, the default) or with the weights embedded (`freeze`) (aoti), and the shape
    profile (aotc.profiles) a package is compiled for, if any (aoti)."""

    opset: int | None = None
    cache_dir: Path | None = None
    use_cache: bool = True
    freeze: bool = False
    fold: bool = True
    profile: Profile | None = None


@dataclass(frozen=True)
class Built:
    """One artifact a format wrote: what it was built with (recorded in the manifest),
    and whether an identical earlier build was reused."""

    build: dict[str, str]
    cached: bool = False


class Format(Protocol):
    """The members of every exporter module."""

    FORMAT: str  # the name on the command line and in aotc.load(backend=...)
    FILE_KIND: FileKind  # the manifest's kind for its files

    def artifact_path(self, kind: str, device: str) -> str:
        """Where the `kind` graph for `device` lives in a bundle."""

    def has_artifacts(self, bundle: Bundle, device: torch.device) -> bool:
        """Whether the bundle holds this format's artifact of every graph for `device`."""

    def load_graph(self, bundle: Bundle, kind: str, device: torch.device) -> Graph:
        """The artifact as a callable over the graph's flat inputs, returning its outputs."""

    def build(self, bundle: Bundle, kind: str, device: torch.device, target: Path, options: BuildOptions) -> Built:
        """Write the artifact of the bundle's `kind` graph for `device` to `target`
        (`aotc compile`); the source format refuses: it is written at export."""

    def write(self, capture: Capture, writer: BundleWriter) -> None:
        """Write every captured graph into a bundle being written at export; formats
        built from a bundle's fx graphs refuse: they have no capture to start from."""


_REGISTRY = {"fx": "aotc.exporters.fx", "aoti": "aotc.exporters.aoti", "onnx": "aotc.exporters.onnx"}


def register(name: str, module: str) -> None:
    """Make the format in `module` (an importable name) available as `name`."""
    _REGISTRY[name] = module


def names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def backends() -> tuple[str, ...]:
    """What `aotc.load(backend=...)` takes: "auto" (aoti where built, else fx) or a format."""
    return ("auto", *_REGISTRY)


def built_only(name: str) -> None:
    """The refusal of `write` by a format that is built from a bundle's fx graphs."""

    raise AotcError(f"{name} artifacts are built from a bundle's fx graphs (aotc compile), not written at export.")


def get(name: str) -> Format:

    if name not in _REGISTRY:
        raise AotcError(f"unknown format {name!r}; aotc has {', '.join(_REGISTRY)}.")
    return cast(Format, importlib.import_module(_REGISTRY[name]))  # a module with Format's members


def add_artifacts(path: str | Path, name: str, devices: Sequence[str] = ("cpu",), kinds: Sequence[str] | None = None,
                  options: BuildOptions = BuildOptions(), on_graph: GraphCallback | None = None,
                  profiles: Sequence[Profile] = (), generic: bool = True) -> Bundle:
    """Build format `name` for every graph (or `kinds`) of the bundle at `path` and each
    device, replacing earlier artifacts of it; returns the reopened bundle. The bundle
    is updated atomically: a failed build leaves it as it was. `profiles` (aoti): one more
    package per graph, device and shape profile; `generic=False` leaves out the package
    for every size."""

    fmt = get(name)
    bundle = Bundle.open(path)
    targets = [with_index(resolve_device(d)) for d in devices]
    kinds = list(kinds or bundle.graph_kinds)

    def jobs(kind: str, device) -> list[tuple[str, BuildOptions]]:
        # a graph no profile narrows (a decode graph's one token) keeps its one package
        narrowed = [(fmt.profile_path(kind, device.type, k), dataclasses.replace(options, profile=p))
                    for k, p in enumerate(profiles) if fmt.narrows(bundle, kind, p)]
        plain = [(fmt.artifact_path(kind, device.type), options)] if generic or not narrowed else []
        return plain + narrowed

    def add(writer: BundleWriter) -> None:
        for device in targets:
            for kind in kinds:
                for rel, opts in jobs(kind, device):
                    if on_graph:
                        on_graph(kind, device.type, "start")
                    built = fmt.build(bundle, kind, device, writer.path(rel), opts)
                    writer.add(rel, fmt.FILE_KIND, graph=kind, device=device.type, build=built.build)
                    if on_graph:
                        on_graph(kind, device.type, "cached" if built.cached else "built")

    # every earlier artifact of these graphs and devices, profiles' included
    devices_built = {d.type for d in targets}
    replaced = {fmt.artifact_path(k, d.type) for d in targets for k in kinds} | {
        f.path for f in bundle.manifest.files
        if f.kind == fmt.FILE_KIND and f.graph in kinds and f.device in devices_built}
    return update_bundle(bundle, add, replaced)
