"""Numbers as people read them; no torch here, so the CLI can use it at import."""

from __future__ import annotations


def human_size(n: float) -> str:
    """Bytes as B, KiB, MiB or GiB: '812 B', '3.8 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def human_time_us(us: float) -> str:
    """Microseconds as µs, ms or s with 4 significant digits at most: '98.1 µs', '227.6 ms'."""
    for unit, scale in (("µs", 1.0), ("ms", 1e3), ("s", 1e6)):
        if us < 1000 * scale or unit == "s":
            value = us / scale
            return f"{value:.1f} {unit}" if value < 1000 else f"{value:.0f} {unit}"
    return f"{us} µs"
