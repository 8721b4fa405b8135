"""Artifact formats. Each module here exposes the same functions:

    FORMAT: str                                   the name used on the command line
    write(capture, root) -> list[FileEntry]       write its files into a staging bundle dir

Adding a format means adding one module and one line in `EXPORTERS`.
"""

from __future__ import annotations

from aotc.exporters import fx

EXPORTERS = {fx.FORMAT: fx}

__all__ = ["EXPORTERS"]
