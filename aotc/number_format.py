"""Numbers as people read them; no torch here, so the CLI can use it at import."""

from __future__ import annotations


def human_size(n: float) -> str:
    """Bytes as B, KiB, MiB or GiB: '812 B', '3.8 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
