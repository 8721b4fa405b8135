"""What the binary files of a bundle may hold, checked before any library reads them.

`torch.export.load` unpickles some members of a `.pt2` archive with plain `pickle`
(opaque objects among the constants) and dlopens shared libraries it finds in it; the
AOTInductor loader extracts its package's members by their stored names. So before an
archive reaches either, its members are checked against what that kind of archive holds
when aotc writes it: an fx graph archive is JSON and version files only (its graphs take
weights as inputs, so its weights and constants tables are empty); an AOTInductor package
is generated code, metadata and compiled libraries, every member inside the archive.
safetensors files get their header checked (dtypes from a closed list, every tensor's
bytes inside the file) before safetensors parses them. A graph archive is loaded here too
(`load_exported_program`), once checked and once its torch.export format is one this torch
reads.
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
import struct
import zipfile
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from aotc import _torch_compat as tc
from aotc.errors import BundleError

# Larger JSON than this in a bundle is damage or an attack, not a model.
MAX_JSON_BYTES = 256 << 20
MAX_ARCHIVE_BYTES = 16 << 30

_RECORDS = r"(archive_format|archive_version|byteorder|\.data/version|\.data/serialization_id)"
_FX_MEMBER = re.compile(
    rf"[A-Za-z0-9_]+/({_RECORDS}|models/[A-Za-z0-9_]+\.json|data/weights/[A-Za-z0-9_]+_config\.json"
    r"|data/constants/[A-Za-z0-9_]+_config\.json|data/sample_inputs/[A-Za-z0-9_]+\.pt)"
)
_AOTI_MEMBER = re.compile(
    rf"[A-Za-z0-9_]+/({_RECORDS}|data/aotinductor/[A-Za-z0-9_]+/[A-Za-z0-9_.\-]+"
    r"\.(cpp|h|so|json|o|bin|cubin|fatbin|ptx|hsaco|spv|txt)"
    r"|data/aotc/weight_fold\.json)"  # aotc's own: how the weights fold (exporters/weight_fold.py)
)


def _members(path: Path, label: str) -> list[zipfile.ZipInfo]:
    """The members of a zip archive, refusing names that leave it, links and bad CRCs."""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            names = [i.filename for i in infos]
            if len(set(names)) != len(names):
                raise BundleError(f"'{path}': {label} has two members with one name; refusing it.")
            if sum(i.file_size for i in infos) > MAX_ARCHIVE_BYTES:
                raise BundleError(f"'{path}': {label} unpacks to more than {MAX_ARCHIVE_BYTES >> 30} GiB; refusing it.")
            for info in infos:
                name = info.filename
                parts = name.split("/")
                if name.startswith("/") or "\\" in name or ".." in parts or ":" in parts[0]:
                    raise BundleError(f"'{path}': {label} member '{name}' would be written outside the archive.")
                if stat.S_ISLNK(info.external_attr >> 16):
                    raise BundleError(f"'{path}': {label} member '{name}' is a symbolic link; refusing it.")
            bad = archive.testzip()
            if bad is not None:
                raise BundleError(f"'{path}': {label} member '{bad}' fails its CRC check; the file is damaged.")
            return infos
    except BundleError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError, NotImplementedError) as e:
        raise BundleError(f"'{path}' is not a readable {label} ({type(e).__name__}: {e}).") from e


def _one_prefix(path: Path, infos: list[zipfile.ZipInfo], label: str) -> None:
    prefixes = {i.filename.split("/")[0] for i in infos}
    if len(prefixes) != 1:
        raise BundleError(f"'{path}': {label} has members under {sorted(prefixes)[:3]}; expected one folder.")


def check_graph_archive(path: Path) -> None:
    """Refuse an fx graph archive holding anything `torch.export.save` does not write for
    an aotc graph: pickles, libraries, tensors, or non-empty weight and constant tables."""
    label = "fx graph archive"
    infos = _members(path, label)
    _one_prefix(path, infos, label)
    with zipfile.ZipFile(path) as archive:
        for info in infos:
            name = info.filename
            if info.is_dir():
                continue
            if not _FX_MEMBER.fullmatch(name):
                raise BundleError(f"'{path}': {label} member '{name}' is not part of an aotc graph; refusing it.")
            if "/data/sample_inputs/" in name and info.file_size:
                raise BundleError(f"'{path}': {label} holds pickled example inputs ('{name}'); refusing it.")
            if name.endswith("_config.json"):
                table = _json(archive.read(name), f"{path}!{name}")
                if table not in ({"config": {}}, {}):
                    raise BundleError(
                        f"'{path}': {label} member '{name}' lists stored weights or constants; an aotc graph "
                        "takes them as inputs. Refusing it (such entries can be pickled objects)."
                    )


def check_compiled_package(path: Path) -> None:
    """Refuse an AOTInductor package with members outside what AOTInductor writes."""
    label = "AOTInductor package"
    infos = _members(path, label)
    _one_prefix(path, infos, label)
    for info in infos:
        if not info.is_dir() and not _AOTI_MEMBER.fullmatch(info.filename):
            raise BundleError(f"'{path}': {label} member '{info.filename}' is not something AOTInductor writes.")


def _json(data: bytes, where: str):
    if len(data) > MAX_JSON_BYTES:
        raise BundleError(f"{where}: {len(data)} bytes of JSON is more than aotc reads ({MAX_JSON_BYTES >> 20} MiB).")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
        reason = "nested too deeply" if isinstance(e, RecursionError) else str(e)
        raise BundleError(f"{where} is not valid JSON ({reason}).") from e


def read_json_bytes(data: bytes, where: str):
    """JSON read from bytes, bounded as read_json_file's; BundleError naming `where` otherwise."""
    return _json(data, where)


def read_json_file(path: Path, where: str | None = None):
    """A JSON file of bounded size and nesting; BundleError naming it otherwise."""
    where = where or str(path)
    if path.stat().st_size > MAX_JSON_BYTES:
        raise BundleError(f"{where}: {path.stat().st_size} bytes is more JSON than aotc reads.")
    return _json(path.read_bytes(), where)


# dtypes safetensors stores, with their sizes in bytes (complex64 as C64; it has no complex128)
SAFETENSORS_DTYPES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8, "C64": 8,
}


def check_safetensors(path: Path) -> dict:
    """The header of a safetensors file, after checking that every tensor it lists has a
    known dtype and lies inside the file with exactly its bytes."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise BundleError(f"'{path}' is not a safetensors file: {size} bytes is shorter than its header.")
        (length,) = struct.unpack("<Q", head)
        if length > min(size - 8, MAX_JSON_BYTES):
            raise BundleError(f"'{path}': its header claims {length} bytes; the file has {size - 8} after it.")
        header = _json(f.read(length), f"'{path}' header")
    if not isinstance(header, dict):
        raise BundleError(f"'{path}': the safetensors header is not an object.")
    data_size = size - 8 - length
    spans = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        where = f"'{path}': tensor '{name}'"
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise BundleError(f"{where} is not described by dtype, shape and data_offsets.")
        itemsize = SAFETENSORS_DTYPES.get(info["dtype"])
        shape, offsets = info["shape"], info["data_offsets"]
        if itemsize is None:
            raise BundleError(f"{where} has dtype {info['dtype']!r}; expected one of {sorted(SAFETENSORS_DTYPES)}.")
        if not _ints(shape) or not _ints(offsets) or len(offsets) != 2:
            raise BundleError(f"{where}: shape and data_offsets must be non-negative integers.")
        numel = 1
        for n in shape:
            numel *= n
        begin, end = offsets
        if not begin <= end <= data_size or end - begin != numel * itemsize:
            raise BundleError(
                f"{where}: bytes {begin}..{end} do not hold its {numel} elements inside the file's {data_size}."
            )
        spans.append((begin, end))
    spans.sort()
    for (_, end), (begin, _) in zip(spans, spans[1:]):
        if begin < end:
            raise BundleError(f"'{path}': two tensors share bytes; the file is damaged.")
    return header


def _ints(values) -> bool:
    return isinstance(values, list) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values)


def load_safetensors(path: Path) -> dict:
    """All tensors of a checked safetensors file (never unpickles)."""

    check_safetensors(path)
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise BundleError(f"'{path}' is not a readable safetensors file ({e}).") from e


def check_export_schema(bundle) -> None:
    """Refuse, by name, graphs saved in a torch.export format this torch cannot read (a
    different major version: torch.export.load's own refusal, said with both torches)."""
    recorded = bundle.manifest.export_schema
    ours = tc.export_schema_version()
    if recorded and recorded[0] != ours[0]:
        saved = ".".join(map(str, recorded))
        raise BundleError(
            f"Bundle '{bundle.path}': its graphs were saved by torch {bundle.manifest.torch_version} in "
            f"torch.export's format {saved}; this torch {torch.__version__} reads format {ours[0]}.x. Export the "
            f"model again under this torch (aotc export), or load the bundle under torch "
            f"{bundle.manifest.torch_version}."
        )


def load_exported_program(path: Path, saved_by: str | None = None):
    """torch.export.load of an archive whose members were checked first, with unpickling
    of arbitrary objects forbidden.

    `check_graph_archive` refuses the members torch would unpickle or dlopen; as a second
    line, TORCH_FORCE_WEIGHTS_ONLY_LOAD turns torch.export.load's `torch.load` fallback
    into an error.
    """

    check_graph_archive(path)
    previous = os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD")
    os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
    # torch.export.load logs a traceback before raising; aotc's error says it in one line
    log = logging.getLogger("torch.export")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        return tc.export_load(str(path))
    except Exception as e:
        other = (f" It was saved by torch {saved_by}, this is torch {torch.__version__}: export the model again "
                 "under this torch (aotc export)." if saved_by and saved_by != torch.__version__ else "")
        raise BundleError(
            f"'{path}' could not be loaded as a safe ExportedProgram ({type(e).__name__}: "
            f"{str(e).splitlines()[0] if str(e) else ''}). aotc never unpickles objects from a bundle.{other}"
        ) from e
    finally:
        log.setLevel(level)
        if previous is None:
            del os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"]
        else:
            os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = previous
