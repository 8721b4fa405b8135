"""regions.json, a regional bundle's manifest (aotc.regional_bundle), as schema dataclasses.

Read and written with `aotc.schema`'s `from_json`, `to_json` and `json_schema`, like the
files of an ordinary bundle; each group of regions is an ordinary bundle of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from aotc.bundle.schema import FileEntry, GraphKind, ModelInfo


@dataclass(frozen=True)
class TensorSpec:
    shape: list[int]
    dtype: str


@dataclass(frozen=True)
class Region:
    """One submodule of the user's model replaced by a loaded bundle at `aotc.apply`:
    its FQN, class, the group whose graphs it runs, and its weights' names and shapes
    (checked against the model it is applied to)."""

    fqn: str
    class_name: str
    group: str
    parameters: dict[str, TensorSpec]
    buffers: dict[str, TensorSpec]


@dataclass(frozen=True)
class RegionGroup:
    """Regions that trace to the same graphs: one bundle at `path` (with the weights of
    `first`), shared by every region of the group; the others' weights are in the
    regional bundle's weights.safetensors under their FQNs."""

    name: str
    path: str
    first: str


@dataclass(frozen=True)
class BreakEntry:
    """One place the whole model could not be captured (aotc.breaks.GraphBreak)."""

    file: str
    line: int
    function: str
    code: str
    kind: str
    reason: str
    fix: str
    torch_reason: str
    stack: list[str]


@dataclass(frozen=True)
class RegionsManifest:
    """regions.json: a regional bundle. `files` lists every file outside the groups'
    bundles and each group's manifest.json (whose own checksum and hashes cover the
    rest), with sizes and sha256; `checksum` covers this file."""

    format_version: int
    aotc_version: str
    torch_version: str
    created: str
    model: ModelInfo
    graph_kinds: list[GraphKind]
    regions: list[Region]
    groups: list[RegionGroup]
    breaks: list[BreakEntry]
    files: list[FileEntry]
    checksum: str = ""
