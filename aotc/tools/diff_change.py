"""The result of `aotc diff`: one `Change` per difference, their kinds, and `BundleDiff`
(every change, the exit-code rule, the JSON CI reads); helpers to diff keyed facts.
"""

from __future__ import annotations

import dataclasses
import typing
from collections import Counter
from dataclasses import dataclass
from typing import Any, Literal

ChangeKind = Literal["signature", "ops", "weights", "files", "build", "outputs", "signing"]
KINDS: tuple[str, ...] = typing.get_args(ChangeKind)
What = Literal["added", "removed", "changed"]
# attribute -> value, e.g. {"role": "buffer", "shape": [8, "2..64"], "dtype": "float32"}
Facts = dict[str, Any]


@dataclass(frozen=True)
class Change:
    """One difference between OLD and NEW.

    `subject` names what changed the way a person would ("inference: input x", a weight's
    FQN, a file's path). `old`/`new` are JSON values: None on the side where the subject
    is absent; for a changed subject with several attributes, dicts holding only the
    attributes that differ. `max_abs` is set for tensors (weights, outputs) of the same
    shape and dtype whose values differ: the largest |new - old| over the positions where
    both are finite; `note` says what that number leaves out (NaN or inf that appeared or
    went away), or why the bytes differ while the values do not.
    """

    kind: ChangeKind
    subject: str
    what: What
    old: Any = None
    new: Any = None
    max_abs: float | None = None
    note: str = ""

    def text(self) -> str:
        """One line for people: subject, then what happened to it."""
        if self.what == "added":
            body = "added" + (f" ({_show(self.new)})" if self.new is not None else "")
        elif self.what == "removed":
            body = "removed" + (f" (was {_show(self.old)})" if self.old is not None else "")
        elif self.max_abs is not None:
            body = f"max abs change {self.max_abs:.6g}"
        elif isinstance(self.old, dict) and isinstance(self.new, dict):
            body = "; ".join(f"{k} {_show(self.old.get(k))} -> {_show(self.new.get(k))}"
                             for k in dict.fromkeys([*self.old, *self.new]))
        else:
            body = f"{_show(self.old)} -> {_show(self.new)}"
        return f"{self.subject}: {body}" + (f" ({self.note})" if self.note else "")


@dataclass(frozen=True)
class BundleDiff:
    """Every change from the bundle at `old` to the one at `new`, in KINDS order.

    `skipped` says what was not compared and why (outputs of a bundle with no inference
    graph, say); `ran` is whether outputs were compared at all (run=True). The exit-code
    rule lives here: 1 when a change of a kind that counts was found, else 0.
    """

    old: str
    new: str
    changes: tuple[Change, ...]
    skipped: tuple[str, ...] = ()
    ran: bool = False

    def counts(self) -> dict[str, int]:
        """Changes per kind, only kinds that have some, in KINDS order."""
        found = Counter(c.kind for c in self.changes)
        return {k: found[k] for k in KINDS if found[k]}

    def exit_code(self, fail_on: typing.Iterable[str] = KINDS) -> int:
        return 1 if any(c.kind in set(fail_on) for c in self.changes) else 0

    def summary(self) -> str:
        """'3 changes: 2 weights, 1 ops', or 'no changes'."""
        if not self.changes:
            return "no changes"
        n = len(self.changes)
        return f"{n} change{'s' if n != 1 else ''}: " + ", ".join(f"{c} {k}" for k, c in self.counts().items())

    def to_json(self) -> dict[str, Any]:
        return {
            "old": self.old,
            "new": self.new,
            "ran": self.ran,
            "counts": self.counts(),
            "changes": [dataclasses.asdict(c) for c in self.changes],
            "skipped": list(self.skipped),
        }


def keyed(kind: ChangeKind, old: dict[str, Any], new: dict[str, Any], label=lambda key: key) -> list[Change]:
    """Changes between two mappings of subject -> value (a Facts dict or a plain value):
    keys on one side only are added/removed; a dict value reports only its differing keys."""
    changes = []
    for key in dict.fromkeys([*old, *new]):
        if key not in new:
            changes.append(Change(kind, label(key), "removed", old=old[key]))
        elif key not in old:
            changes.append(Change(kind, label(key), "added", new=new[key]))
        elif old[key] != new[key]:
            before, after = _differing(old[key], new[key])
            changes.append(Change(kind, label(key), "changed", old=before, new=after))
    return changes


def _differing(old: Any, new: Any) -> tuple[Any, Any]:
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return old, new
    keys = [k for k in dict.fromkeys([*old, *new]) if old.get(k) != new.get(k)]
    return {k: old.get(k) for k in keys}, {k: new.get(k) for k in keys}


def _show(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k} {_show(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return str(value)
