"""Optional dependencies, imported where needed with an error that says what to install."""

from __future__ import annotations

import importlib
from types import ModuleType

from aotc.errors import MissingDependencyError


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """Import `module`, or say which aotc extra provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingDependencyError(
            f"{purpose} needs {module}, which is not installed. Install it with: "
            f"pip install 'aotc[{extra}]' torch==2.13.0"
        ) from e
