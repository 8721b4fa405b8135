"""Bundle I/O: atomic writes, and a validating read-only view of a bundle directory.

A bundle is written into a temporary directory next to its target and renamed into
place only when complete, so an interrupted run never leaves half a bundle and never
clobbers a good one. Reading validates every JSON file against `aotc.schema` and every
file's size and sha256 against the manifest; nothing in the bundle is executed or
unpickled by `Bundle.open`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from aotc.errors import BundleError
from aotc.schema import (
    FORMAT_VERSION,
    FileEntry,
    Manifest,
    Metadata,
    Signature,
    from_json,
    to_json,
)

MANIFEST = "manifest.json"
SIGNATURE = "signature.json"
METADATA = "metadata.json"
WEIGHTS = "weights.safetensors"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_entry(root: Path, rel: str, kind: str, graph: str | None = None, device: str | None = None) -> FileEntry:
    path = root / rel
    return FileEntry(
        path=rel, kind=kind, size=path.stat().st_size, sha256=sha256_file(path), graph=graph, device=device
    )


def write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_json(obj), indent=2, sort_keys=False) + "\n")


def check_target(out: Path, force: bool) -> None:
    """Refuse to replace an existing path unless `force`; never replace a non-bundle."""
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return
    if not force:
        raise BundleError(
            f"'{out}' already exists. Pass --force (force=True) to replace it with the new "
            "bundle, or choose another output directory."
        )
    if not out.is_dir() or not ((out / MANIFEST).exists() or not any(out.iterdir())):
        raise BundleError(
            f"'{out}' exists and is not an aotc bundle; refusing to replace it even with --force. "
            "Choose another output directory."
        )


@contextlib.contextmanager
def staging_dir(out: Path, force: bool) -> Iterator[Path]:
    """A temp dir next to `out`; on success it replaces `out` atomically, else it is removed."""
    out = Path(out)
    check_target(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        yield tmp
        _make_readable(tmp)
        replace_dir(tmp, out, force)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def update_bundle(bundle: "Bundle", add, replaced: set[str]) -> "Bundle":
    """Add files to an existing bundle atomically and return the reopened bundle.

    A staging copy (hard links, so no data is copied) gets `add(root) -> [FileEntry]` and
    a new manifest, then replaces the bundle. Entries in `replaced` are dropped first.
    """
    import dataclasses
    import os

    with staging_dir(bundle.path, force=True) as root:
        shutil.copytree(bundle.path, root, copy_function=os.link, dirs_exist_ok=True)
        for rel in replaced:
            if (root / rel).exists():
                (root / rel).unlink()  # a hard link into the old bundle: never write through it
        kept = [f for f in bundle.manifest.files if f.path not in replaced]
        entries = kept + add(root)
        (root / MANIFEST).unlink()
        write_json(root / MANIFEST, dataclasses.replace(bundle.manifest, files=entries))
    return Bundle.open(bundle.path)


def _make_readable(root: Path) -> None:
    """mkdtemp and safetensors create owner-only files; give them the usual umask modes."""
    umask = os.umask(0)
    os.umask(umask)
    for path in [root, *root.rglob("*")]:
        os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~umask)


def replace_dir(new: Path, out: Path, force: bool) -> None:
    """Move `new` to `out`; an old `out` is set aside first and removed only afterwards."""
    check_target(out, force)
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
        os.rename(out, old)
    try:
        os.rename(new, out)
    except BaseException:
        if old is not None:
            os.rename(old, out)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _read_json(root: Path, name: str):
    path = root / name
    if not path.is_file():
        raise BundleError(
            f"Bundle '{root}' has no {name}. It is incomplete or not an aotc bundle; export it again."
        )
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BundleError(f"Bundle '{root}': {name} is not valid JSON ({e}). Export the bundle again.") from e


@dataclass(frozen=True)
class Bundle:
    """A read-only, validated view of a bundle directory.

    Opening checks the manifest's format version, that every listed file exists with
    its recorded size and sha256, and that signature.json and metadata.json match the
    schema. It loads nothing into torch.
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
        raw = _read_json(root, MANIFEST)
        version = raw.get("format_version") if isinstance(raw, dict) else None
        if isinstance(version, int) and version > FORMAT_VERSION:
            raise BundleError(
                f"Bundle '{root}' has format_version {version}, newer than this aotc reads "
                f"({FORMAT_VERSION}). Upgrade aotc to open it."
            )
        manifest = from_json(Manifest, raw, f"{root}/{MANIFEST}")
        if manifest.format_version < 1:
            raise BundleError(f"{root}/{MANIFEST}: format_version {manifest.format_version} is not valid.")
        for entry in manifest.files:
            _check_file(root, entry, verify_hashes)
        signature = from_json(Signature, _read_json(root, SIGNATURE), f"{root}/{SIGNATURE}")
        metadata = from_json(Metadata, _read_json(root, METADATA), f"{root}/{METADATA}")
        return cls(root, manifest, signature, metadata)

    @property
    def graph_kinds(self) -> list[str]:
        return list(self.manifest.graph_kinds)

    def graph_code(self, kind: str) -> str:
        self._require_graph(kind)
        return (self.path / "graphs" / f"{kind}.py").read_text()

    def graph_path(self, kind: str) -> Path:
        self._require_graph(kind)
        return self.path / "graphs" / f"{kind}.pt2"

    def _require_graph(self, kind: str) -> None:
        if kind not in self.graph_kinds:
            raise BundleError(
                f"Bundle '{self.path}' has no '{kind}' graph; it has {', '.join(self.graph_kinds)}."
            )

    def load_program(self, kind: str):
        """The graph's ExportedProgram. See `load_exported_program`."""
        return load_exported_program(self.graph_path(kind))

    def weights(self) -> dict:
        from safetensors.torch import load_file

        return load_file(str(self.path / WEIGHTS))


def load_exported_program(path: Path):
    """torch.export.load with unpickling of arbitrary objects forbidden.

    torch.export.load falls back to `torch.load(weights_only=False)` for parts it cannot
    read safely; TORCH_FORCE_WEIGHTS_ONLY_LOAD turns that fallback into an error.
    """
    import torch

    previous = os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD")
    os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
    try:
        return torch.export.load(str(path))
    except Exception as e:
        raise BundleError(
            f"'{path}' could not be loaded as a safe ExportedProgram ({type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''}). aotc never unpickles objects from a bundle."
        ) from e
    finally:
        if previous is None:
            del os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"]
        else:
            os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = previous


def _check_file(root: Path, entry: FileEntry, verify_hashes: bool) -> None:
    rel = Path(entry.path)
    if rel.is_absolute() or ".." in rel.parts:
        raise BundleError(f"{root}/{MANIFEST}: file path '{entry.path}' leaves the bundle; refusing it.")
    path = root / rel
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
        digest = sha256_file(path)
        if digest != entry.sha256:
            raise BundleError(
                f"Bundle '{root}': {entry.path} has sha256 {digest[:12]}..., the manifest says "
                f"{entry.sha256[:12]}.... The file was modified; export the bundle again."
            )
