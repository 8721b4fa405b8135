"""Bundle I/O: one writer that records every file, and a validating read-only view.

A bundle is written into a staging directory beside its target and swapped into place
only when complete (`aotc.bundle.atomic`), so an interrupted run never leaves half a bundle and
never clobbers a good one. Every file goes through `BundleWriter`, which records its size
and sha256 in manifest.json; the manifest carries a checksum of its own content.

`Bundle.open` trusts nothing it reads: the manifest's checksum, every file listed with
its size and sha256, no file that is not listed, no symbolic link and no path leaving the
bundle; JSON of bounded size and nesting, checked against `aotc.bundle.schema`; then the
signature and metadata checked against each other (`aotc.bundle.check`). It executes,
unpickles and dlopens nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import torch

from aotc.bundle.archives import check_export_schema, load_exported_program, load_safetensors, read_json_file
from aotc.bundle.atomic import staging_dir as _atomic_staging
from aotc.bundle.check import check_consistency
from aotc.bundle.content_check import check_optimizer_state, check_program, check_weights
from aotc.bundle.schema import (
    FORMAT_VERSION,
    OLDEST_FORMAT_READ,
    FileEntry,
    FileKind,
    Manifest,
    Metadata,
    Signature,
    from_json,
    to_json,
)
from aotc.contract.optimizers import OPTIMIZER_STATE
from aotc.errors import BundleError

MANIFEST = "manifest.json"
SIGNATURE = "signature.json"
METADATA = "metadata.json"
WEIGHTS = "weights.safetensors"
SIGNATURE_FILE = "model.sig"  # the publisher's signature over every other file (aotc.bundle.signing); not listed


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def manifest_checksum(raw: dict) -> str:
    """sha256 of a manifest's JSON content, its own `checksum` field left out."""
    content = {k: v for k, v in raw.items() if k != "checksum"}
    return hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def check_rel_path(rel: str, where: str) -> PurePosixPath:
    """A file name of a bundle: relative, '/'-separated, inside the bundle."""
    path = PurePosixPath(rel)
    if (not rel or rel.startswith("/") or "\\" in rel or "\0" in rel or path.as_posix() != rel
            or any(p in ("", ".", "..") for p in rel.split("/"))):
        raise BundleError(f"{where}: file path {rel!r} is not a plain relative path inside the bundle; refusing it.")
    return path


class BundleWriter:
    """Writes the files of a bundle under `root` and records each one for the manifest.

    Every file of a bundle is written through here, so none goes unlisted. A path is
    unlinked before it is written: in a staged update its old version is a hard link
    into the live bundle, which must never be written through.
    """

    def __init__(self, root: Path, entries: list[FileEntry] = ()):
        self.root = Path(root)
        self._entries: dict[str, FileEntry] = {e.path: e for e in entries}

    def path(self, rel: str) -> Path:
        """Where to write `rel`; its folder exists and nothing is at the path."""
        check_rel_path(rel, "BundleWriter")
        target = self.root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if os.path.lexists(target):
            target.unlink()
        return target

    def add(self, rel: str, kind: FileKind, *, graph: str | None = None, device: str | None = None,
            build: dict[str, str] | None = None) -> FileEntry:
        """Record the file written at `path(rel)`, hashing it now."""
        target = self.root / rel
        entry = FileEntry(path=rel, kind=kind, size=target.stat().st_size, sha256=sha256_file(target),
                          graph=graph, device=device, build=build)
        self._entries[rel] = entry
        return entry

    def write_json(self, rel: str, obj, kind: FileKind) -> FileEntry:
        self.path(rel).write_text(json.dumps(to_json(obj), indent=2) + "\n")
        return self.add(rel, kind)

    def copy(self, rel: str, src: Path, kind: FileKind) -> FileEntry:
        shutil.copyfile(src, self.path(rel))
        return self.add(rel, kind)

    def remove(self, rel: str) -> None:
        if os.path.lexists(self.root / rel):
            (self.root / rel).unlink()
        self._entries.pop(rel, None)

    @property
    def entries(self) -> list[FileEntry]:
        return list(self._entries.values())

    def write_manifest(self, manifest: Manifest) -> None:
        """Write manifest.json listing every recorded file, with its checksum."""
        raw = to_json(dataclasses.replace(manifest, files=self.entries, checksum=""))
        raw["checksum"] = manifest_checksum(raw)
        self.path(MANIFEST).write_text(json.dumps(raw, indent=2) + "\n")


def check_target(out: Path, force: bool) -> None:
    """Refuse to replace an existing path unless `force`; never replace a non-bundle."""
    if not os.path.lexists(out) or (out.is_dir() and not out.is_symlink() and not any(out.iterdir())):
        return
    if not force:
        raise BundleError(
            f"'{out}' already exists. Pass --force (force=True) to replace it with the new "
            "bundle, or choose another output directory."
        )
    bundle = (out / MANIFEST).is_file() or (out / "regions.json").is_file()  # a regional bundle has regions.json
    if out.is_symlink() or not out.is_dir() or not bundle:
        raise BundleError(
            f"'{out}' exists and is not an aotc bundle; refusing to replace it even with --force. "
            "Choose another output directory."
        )


def check_writable(out: Path) -> None:
    """Fail before minutes of work if the bundle could not be written beside `out`."""
    parent = Path(out).parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise BundleError(f"cannot write the bundle '{out}': '{parent}' is not a writable directory.")


@contextlib.contextmanager
def staging_dir(out: Path, force: bool) -> Iterator[Path]:
    """A temp dir beside `out`; on success it takes `out`'s place atomically, else it is removed."""
    out = Path(out)
    check_target(out, force)
    check_writable(out)
    with _atomic_staging(out, lambda target: check_target(target, force)) as tmp:
        yield tmp


def update_bundle(bundle: "Bundle", add, replaced: set[str]) -> "Bundle":
    """Add files to an existing bundle atomically and return the reopened bundle.

    A staging copy (hard links, so no data is copied) gets `add(writer)`, which writes
    and records its files through the BundleWriter, and a new manifest; then it replaces
    the bundle. Entries in `replaced` are dropped first, and so is a signature (model.sig).
    """
    with staging_dir(bundle.path, force=True) as root:
        shutil.copytree(bundle.path, root, copy_function=os.link, dirs_exist_ok=True)
        (root / SIGNATURE_FILE).unlink(missing_ok=True)  # it covers the old files only: sign again
        writer = BundleWriter(root, bundle.manifest.files)
        for rel in replaced:
            writer.remove(rel)
        add(writer)
        writer.write_manifest(bundle.manifest)
    return Bundle.open(bundle.path)


# Files every bundle lists, by kind.
_CORE = {SIGNATURE: "signature", METADATA: "metadata", WEIGHTS: "weights"}


@dataclass(frozen=True)
class Bundle:
    """A read-only, validated view of a bundle directory.

    Opening checks the manifest (format version, checksum), that the directory holds
    exactly the files it lists, each with its recorded size and sha256, no symbolic links,
    and that signature.json and metadata.json match the schema and each other. It loads
    nothing into torch.
    """

    path: Path
    manifest: Manifest
    signature: Signature
    metadata: Metadata

    @classmethod
    def open(cls, path: str | Path, verify_hashes: bool = True) -> "Bundle":

        root = Path(path)
        if not root.is_dir():
            raise BundleError(f"Bundle '{root}' not found: no such directory.")
        manifest = _read_manifest(root)
        _check_listing(root, manifest)
        for entry in manifest.files:
            _check_file(root, entry, verify_hashes)
        signature = from_json(Signature, read_json_file(root / SIGNATURE), f"{root}/{SIGNATURE}")
        metadata = from_json(Metadata, read_json_file(root / METADATA), f"{root}/{METADATA}")
        check_consistency(manifest, signature, metadata, root)
        return cls(root, manifest, signature, metadata)

    @property
    def graph_kinds(self) -> list[str]:
        return list(self.manifest.graph_kinds)

    def graph_code(self, kind: str) -> str:
        self._require_graph(kind)
        try:
            return (self.path / "graphs" / f"{kind}.py").read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise BundleError(f"Bundle '{self.path}': graphs/{kind}.py is not UTF-8 text ({e}).") from e

    def graph_path(self, kind: str) -> Path:
        self._require_graph(kind)
        return self.path / "graphs" / f"{kind}.pt2"

    def _require_graph(self, kind: str) -> None:
        if kind not in self.graph_kinds:
            raise BundleError(
                f"Bundle '{self.path}' has no '{kind}' graph; it has {', '.join(self.graph_kinds)}."
            )

    def exported_program(self, kind: str):
        """The graph's ExportedProgram (see `load_exported_program`), once the bundle's
        torch.export format is one this torch reads."""

        check_export_schema(self)
        return load_exported_program(self.graph_path(kind), self.manifest.torch_version)

    def load_program(self, kind: str):
        """The graph's ExportedProgram, checked against the signature."""

        program = self.exported_program(kind)
        check_program(self, kind, program)
        return program

    def weights(self) -> dict:
        """Every tensor of weights.safetensors, checked against what the graphs take."""

        tensors = load_safetensors(self.path / WEIGHTS)
        check_weights(self, tensors)
        return tensors

    def optimizer_state(self) -> dict:
        """The state of the optimizer a joint bundle carries ('<fqn>/<key>' -> tensor),
        checked against what its graph takes; {} for a bundle without one."""

        if self.metadata.optimizer is None:
            return {}
        tensors = load_safetensors(self.path / OPTIMIZER_STATE)
        check_optimizer_state(self, tensors)
        return tensors


def _read_manifest(root: Path) -> Manifest:
    path = root / MANIFEST
    if path.is_symlink() or not path.is_file():
        raise BundleError(
            f"Bundle '{root}' has no {MANIFEST}. It is incomplete or not an aotc bundle; export it again."
        )
    raw = read_json_file(path, f"{root}/{MANIFEST}")
    version = raw.get("format_version") if isinstance(raw, dict) else None
    if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
        raise BundleError(
            f"Bundle '{root}' has format_version {version}, newer than this aotc reads "
            f"({FORMAT_VERSION}). Upgrade aotc to open it."
        )
    if isinstance(version, int) and version < OLDEST_FORMAT_READ:
        raise BundleError(
            f"Bundle '{root}' has format_version {version}: it predates hashing every file of a bundle, "
            f"and this aotc reads versions {OLDEST_FORMAT_READ} to {FORMAT_VERSION}. Export it again with this aotc."
        )
    manifest = from_json(Manifest, raw, f"{root}/{MANIFEST}")
    if manifest.checksum != manifest_checksum(raw):
        raise BundleError(
            f"Bundle '{root}': {MANIFEST} does not match its checksum; it was changed or damaged. "
            "Export the bundle again."
        )
    return manifest


def link_error(root: Path, rel: str) -> BundleError:
    return BundleError(f"Bundle '{root}': '{rel}' is a symbolic link; a bundle holds plain files only.")


def refuse_links(root: Path) -> None:
    """A link anywhere in the bundle is refused, seen with lstat before anything is opened:
    opening it would read what it points to, which may be outside the bundle."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = Path(dirpath) / name
            if stat.S_ISLNK(os.lstat(full).st_mode):
                raise link_error(root, full.relative_to(root).as_posix())


def _check_listing(root: Path, manifest: Manifest) -> None:
    """The directory holds exactly the files the manifest lists, and no links."""
    where = f"{root}/{MANIFEST}"
    listed: dict[str, FileEntry] = {}
    for entry in manifest.files:
        check_rel_path(entry.path, where)
        if entry.path in listed or entry.path == MANIFEST:
            raise BundleError(f"{where}: '{entry.path}' is listed twice.")
        listed[entry.path] = entry
    required = dict(_CORE)
    for kind in manifest.graph_kinds:
        required[f"graphs/{kind}.pt2"] = "graph"
        required[f"graphs/{kind}.py"] = "graph_code"
    for rel, kind in required.items():
        if rel not in listed or listed[rel].kind != kind:
            raise BundleError(f"{where}: '{rel}' is not listed as a {kind} file; the manifest is incomplete.")
    for rel, kind in ((e.path, e.kind) for e in manifest.files):
        if kind in ("signature", "metadata") and rel not in required:
            raise BundleError(f"{where}: '{rel}' is listed as {kind}; only {SIGNATURE}/{METADATA} are.")
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            mode = os.lstat(full).st_mode
            if stat.S_ISLNK(mode):
                raise link_error(root, rel)
            if name in filenames and rel not in (MANIFEST, SIGNATURE_FILE):  # model.sig: aotc.bundle.signing
                if not stat.S_ISREG(mode):
                    raise BundleError(f"Bundle '{root}': '{rel}' is not a regular file.")
                if rel not in listed:
                    raise BundleError(
                        f"Bundle '{root}': '{rel}' is not listed in {MANIFEST}; a bundle holds only the files "
                        "it lists. Remove it, or export the bundle again."
                    )


def _check_file(root: Path, entry: FileEntry, verify_hashes: bool) -> None:
    path = root / entry.path
    if not path.is_file():
        raise BundleError(
            f"Bundle '{root}' is missing {entry.path} (listed in {MANIFEST}). "
            "The bundle is incomplete; export it again."
        )
    size = path.stat().st_size
    if size != entry.size:
        raise BundleError(
            f"Bundle '{root}': {entry.path} is {size} bytes, the manifest says {entry.size}. "
            "The file was changed or truncated; export the bundle again."
        )
    if verify_hashes:
        check_hash(root, entry)


def check_hash(root: Path, entry: FileEntry) -> None:
    digest = sha256_file(root / entry.path)
    if digest != entry.sha256:
        raise BundleError(
            f"Bundle '{root}': {entry.path} has sha256 {digest[:12]}..., the manifest says "
            f"{entry.sha256[:12]}.... The file was modified; export the bundle again."
        )
