"""Results of `aotc verify --record` and `aotc bench --record`, kept in the bundle.

A record is plain JSON under `records/` (kind "record" in the manifest, hashed like
every other file), written with the bundle's atomic update; `aotc report` draws it and
`aotc diff` sees it as a changed file. Reading a record checks its shape, since a
bundle may come from anyone: values are shown, never run.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

from aotc.bundle.archives import read_json_file
from aotc.bundle.files import Bundle, update_bundle
from aotc.errors import BundleError

RECORDS = {"verify": "records/verify.json", "bench": "records/bench.json"}
# fields each row of a record must have, with their JSON types
_ROWS = {
    "verify": ("checks", {"artifact": str, "name": str, "passed": bool}),
    "bench": ("results", {"variant": str}),
}


def write_record(path: str | Path, name: str, data: dict[str, Any]) -> Bundle:
    """Store `data` as the bundle's `name` record (replacing an earlier one); returns the
    reopened bundle."""
    if name not in RECORDS:
        raise ValueError(f"unknown record '{name}'")
    bundle = Bundle.open(path)
    rel = RECORDS[name]
    recorded = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    payload = json.loads(json.dumps({"recorded": recorded, **data}))  # as a reader will see it: tuples are lists
    _check(name, payload, rel)
    return update_bundle(bundle, lambda writer: writer.write_json(rel, payload, "record"), replaced={rel})


def read_records(bundle: Bundle) -> dict[str, dict[str, Any]]:
    """The bundle's records by name; a record's shape is checked before it is used."""
    listed = {f.path for f in bundle.manifest.files}
    records = {}
    for name, rel in RECORDS.items():
        if rel in listed:
            data = read_json_file(bundle.path / rel, f"{bundle.path}/{rel}")
            _check(name, data, f"{bundle.path}/{rel}")
            records[name] = data
    return records


def _check(name: str, data: Any, where: str) -> None:
    key, fields = _ROWS[name]
    rows = data.get(key) if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise BundleError(f"{where}: expected an object with a list '{key}'; found {type(rows).__name__}. "
                          f"Record it again with aotc {name} --record.")
    for i, row in enumerate(rows):
        for field, kind in fields.items():
            if not isinstance(row, dict) or not isinstance(row.get(field), kind):
                raise BundleError(f"{where}: {key}[{i}] has no {kind.__name__} '{field}'. "
                                  f"Record it again with aotc {name} --record.")
        for field, value in row.items():
            if value is not None and not isinstance(value, (str, bool, int, float, list)):
                raise BundleError(f"{where}: {key}[{i}].{field} is a {type(value).__name__}; records hold plain values.")
