"""Which commit's code a long run's parts ran on, and whether another commit has the same code.

The coverage sweep and the benchmark suite take longer than one session, so they run in
parts. Each part records the commit it ran on; a part is current for a later commit whose
code under the run's paths is the same, so parts of several sessions add up to one run of
that code. Needs a git checkout: elsewhere every commit is "?", never the same as another.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path


def current_commit(root: Path, paths: tuple[str, ...]) -> str:
    """HEAD's short hash, with "+" where the working tree differs from it under `paths`
    (pathspecs); "?" outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", *paths], cwd=root,
                               capture_output=True, text=True)
    except OSError:  # no git here
        return "?"
    if head.returncode != 0:
        return "?"
    return head.stdout.strip() + ("+" if dirty.stdout.strip() else "")


@functools.cache
def same_code(root: Path, ran: str, now: str, paths: tuple[str, ...]) -> bool:
    """Whether commit `ran` has the code of `now` under `paths` ("+": changes not committed,
    so never the same; "?": unknown)."""
    if ran == now and not now.endswith("+") and ran != "?":
        return True
    if "+" in (ran[-1:], now[-1:]) or "?" in (ran, now):
        return False
    try:
        diff = subprocess.run(["git", "diff", "--quiet", ran, now, "--", *paths], cwd=root, capture_output=True)
    except OSError:
        return False
    return diff.returncode == 0
