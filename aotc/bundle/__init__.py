"""The bundle: its files and JSON schema, integrity checks, atomic writes and archives.

A bundle is a directory (DESIGN.md): manifest.json lists every other file with its size
and sha256; `Bundle.open` checks all of it and runs nothing.

    files           the read-only view (`Bundle`) and the writer that records every file
    schema          the JSON files as validating dataclasses (schema_json: their (de)serialization;
                    regions_schema, subclasses_schema: the sections those features add)
    check           the JSON checked against itself; content_check: files against the JSON
    archives        what the binary files may hold, checked before any library reads them
    atomic          directories replaced atomically; fingerprint: what an artifact was built for
    records, summary  verify/bench results kept in a bundle; what a bundle holds, as plain data
    signing         the publisher's signature over every file (model.sig), and the trust policy
"""

from __future__ import annotations

import importlib

# `from aotc.bundle import Bundle` (aotc 0.1's path) still works; imported on first use, so that
# importing `aotc.bundle.schema` does not import the reader (which needs contract/, which needs
# the schema).
_FILES = ("MANIFEST", "METADATA", "SIGNATURE", "WEIGHTS", "Bundle", "BundleWriter", "load_exported_program",
          "manifest_checksum", "sha256_file", "check_hash", "check_rel_path", "check_target", "check_writable",
          "staging_dir", "update_bundle")
__all__ = list(_FILES)


def __getattr__(name: str):
    if name in _FILES:
        return getattr(importlib.import_module("aotc.bundle.files"), name)
    raise AttributeError(f"module 'aotc.bundle' has no attribute {name!r}")
