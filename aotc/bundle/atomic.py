"""Replacing a directory atomically, and cleaning up after writers that died.

A bundle is written into a staging directory beside its target, `.<name>.tmp-XXXXXXXX`,
which its writer holds under an exclusive `flock` for as long as it lives. Complete, it
takes the target's place with one `renameat2(RENAME_EXCHANGE)`: at every instant the
target path is the old bundle or the new one, never missing, even if the process is
killed. The old bundle, now at the staging name, is then removed.

A writer killed mid-way leaves its staging directory behind, unlocked (the kernel drops
a dead process's locks); the next write to the same target removes it. A staging
directory whose lock is held belongs to a live writer and is left alone, so concurrent
writers to one target never delete each other's work: the last to finish wins.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _renameat2():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2  # glibc 2.28+
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return fn


_RENAMEAT2 = _renameat2()


def exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one atomic step; False where the system cannot."""
    if _RENAMEAT2 is None:
        return False
    if _RENAMEAT2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):  # filesystem or kernel without it
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def _staging_prefix(out: Path) -> str:
    return f".{out.name}.tmp-"


def _try_lock(path: Path) -> int | None:
    """An fd holding an exclusive lock on directory `path`, or None if another holds it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def remove_stale(out: Path) -> list[Path]:
    """Remove staging directories of `out` whose writer is gone; returns what was removed."""
    removed = []
    parent = out.parent
    if not parent.is_dir():
        return removed
    for path in parent.glob(_staging_prefix(out) + "*"):
        if path.is_symlink() or not path.is_dir():
            continue
        fd = _try_lock(path)
        if fd is None:
            continue  # a live writer's
        try:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        finally:
            os.close(fd)
    _restore_set_aside(out)
    return removed


def _new_staging(out: Path) -> tuple[Path, int]:
    """A fresh staging directory for `out`, locked by this process."""
    for _ in range(100):
        tmp = Path(tempfile.mkdtemp(prefix=_staging_prefix(out), dir=out.parent))
        fd = _try_lock(tmp)
        # Another writer's cleanup may have taken it between mkdtemp and the lock.
        if fd is not None and tmp.is_dir() and os.stat(tmp).st_ino == os.fstat(fd).st_ino:
            return tmp, fd
        if fd is not None:
            os.close(fd)
    raise OSError(f"could not create a staging directory beside '{out}'")


@contextlib.contextmanager
def staging_dir(out: Path, check: Callable[[Path], None]) -> Iterator[Path]:
    """A locked temp dir beside `out`; on success it takes `out`'s place atomically, on
    failure it is removed. `check(out)` runs again just before the swap (is the target
    still one we may replace?)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(out)
    tmp, fd = _new_staging(out)
    try:
        yield tmp
        _make_readable(tmp)
        check(out)
        old = _swap_into_place(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        os.close(fd)


def _swap_into_place(new: Path, out: Path) -> Path | None:
    """Put `new` at `out`. Returns where the old `out` now is (to be removed), or None."""
    while True:
        if not os.path.lexists(out):
            try:
                os.rename(new, out)
                return None
            except OSError as e:
                if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
                continue  # another writer got there first: exchange with theirs
        if exchange(new, out):
            return new
        return _two_renames(new, out)


def _set_aside_name(out: Path) -> Path:
    return out.parent / f".{out.name}.old"


def _two_renames(new: Path, out: Path) -> Path:
    """Where RENAME_EXCHANGE is missing: set the old bundle aside, then move the new one
    in. A crash in between leaves `.<name>.old`, which the next write puts back."""
    old = _set_aside_name(out)
    shutil.rmtree(old, ignore_errors=True)
    os.rename(out, old)
    try:
        os.rename(new, out)
    except BaseException:
        os.rename(old, out)
        raise
    return old


def _restore_set_aside(out: Path) -> None:
    old = _set_aside_name(out)
    if old.is_dir() and not old.is_symlink():
        if os.path.lexists(out):
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(old, out)


def _make_readable(root: Path) -> None:
    """mkdtemp and safetensors create owner-only files; give them the usual umask modes."""
    umask = os.umask(0)
    os.umask(umask)
    for path in [root, *root.rglob("*")]:
        os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~umask)
