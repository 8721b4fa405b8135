"""Sweep cells aotc is expected not to pass, each with the words its detail must contain
and why. (case name pattern, column) -> words. A cell that stops failing is noticed in
the table's details; a failure not listed here fails the sweep."""

from __future__ import annotations

PINNED: dict[tuple[str, str], str] = {
}
