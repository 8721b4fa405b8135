"""What every command shares: error handling, options, and the stderr console."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import sys
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from aotc.errors import AotcError, CaptureError
from aotc.number_format import human_size  # noqa: F401  (the commands import it from here)

# Commands import the library inside their bodies: `aotc --help` imports no torch (STYLE.md).

INTERNAL_ERROR = 2


def console():
    """A rich console on stderr: people read stderr, programs read stdout."""
    from rich.console import Console

    # piped or captured, tables keep their natural width instead of folding at 80 columns,
    # unless COLUMNS says how wide (as on a terminal, where tables fit its width)
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() else None if sys.stderr.isatty() else PIPED_WIDTH
    return Console(stderr=True, highlight=False, width=width)


PIPED_WIDTH = 100_000  # wider than any table aotc prints: piped output is never folded


def step_progress(out, transient: bool = True):
    """A progress display for steps that take seconds: spinner, what runs, a bar (once
    the number of steps is known) and the elapsed time of the current step."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(bar_width=30), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=out, transient=transient)


def record_results(bundle, name: str, data: dict, out) -> None:
    """Keep `data` in the bundle as its `name` record, for aotc report."""
    from aotc.bundle.records import RECORDS, write_record

    signed = is_signed(bundle)
    write_record(bundle, name, data)
    out.print(f"recorded in {bundle}/{RECORDS[name]}")
    note_signature_dropped(out, signed, "recording")


def is_signed(bundle) -> bool:
    return (Path(bundle) / "model.sig").is_file()


def note_signature_dropped(out, was_signed: bool, what: str) -> None:
    """A change to a signed bundle drops its signature (it covered the old files): say so."""
    if was_signed:
        out.print(f"note: the bundle's signature (model.sig) covered its files before {what}, so it was removed: "
                  "sign the bundle again with aotc sign.")


def debug_option(fn: Callable) -> Callable:
    return click.option("--debug", is_flag=True,
                        help="Show the full traceback on errors, and other libraries' warnings.")(fn)


def json_option(fn: Callable) -> Callable:
    return click.option(
        "--json", "as_json", is_flag=True, help="Print a machine-readable JSON result on stdout."
    )(fn)


# Libraries whose warnings are about their own internals, never the user's model:
# torchao's "Failed to load ..._C_*.so" on import, torch's pytree deprecations, ...
LIBRARIES = r"(torch|torchao|transformers|tokenizers|safetensors|onnx|onnxscript|onnx_ir|onnxruntime|sympy)(\.|$)"


@contextlib.contextmanager
def quiet_libraries(debug: bool):
    """While a command runs, what other libraries log below ERROR, and the Python warnings
    they raise, stay off stderr (all of it shows with --debug). Warnings raised from the
    user's own code (a model file's forward) still show: they are the user's concern."""
    if debug:
        yield
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=LIBRARIES)
        warnings.showwarning = _note
        logging.disable(logging.WARNING)  # torch sets its loggers' levels when imported; this holds whatever the order
        try:
            yield
        finally:
            logging.disable(logging.NOTSET)


def _note(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning that gets through, as one line: aotc's own say what to do in their words."""
    click.echo(f"note: {message}", err=True)


def handles_errors(fn: Callable) -> Callable:
    """Turn AotcError into `Error: ...` and exit 1; anything else is an internal error (2).

    `--debug` adds the traceback. Click's own usage errors pass through untouched.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        debug = kwargs.get("debug", False)
        try:
            with quiet_libraries(debug):
                return fn(*args, **kwargs)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except AotcError as e:
            if debug:
                traceback.print_exc(file=sys.stderr)
            if kwargs.get("as_json") and hasattr(e, "to_json"):
                emit_json({"ok": False, **e.to_json()})  # e.g. the graph-break report, for CI
            click.echo(f"Error: {e}", err=True)
            if not debug and isinstance(e, CaptureError) and e.__cause__ is not None:
                click.echo("Pass --debug for torch's full message.", err=True)  # the error has its first line
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            click.echo("Interrupted; nothing was written.", err=True)
            sys.exit(130)
        except Exception as e:
            if debug:
                traceback.print_exc(file=sys.stderr)
            click.echo(
                f"Internal error: {type(e).__name__}: {e}\n"
                "This is a bug in aotc or torch. Rerun with --debug for the traceback and "
                "report it.",
                err=True,
            )
            sys.exit(INTERNAL_ERROR)

    return wrapper


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, default=str))


class Phases:
    """Shows the running phase with a spinner and prints each finished one with its time."""

    def __init__(self, out):
        self.out = out
        self.times: dict[str, float] = {}
        self._current: str | None = None
        self._t0 = 0.0
        self._status = None

    def start(self, name: str) -> None:
        import time

        self.finish()
        self._current, self._t0 = name, time.perf_counter()
        self._status = self.out.status(f"{name}...")
        self._status.start()

    def finish(self) -> None:
        import time

        if self._current is None:
            return
        self._status.stop()
        elapsed = time.perf_counter() - self._t0
        self.times[self._current] = elapsed
        self.out.print(f"[green]✓[/] {self._current:<8} {elapsed:6.2f} s")
        self._current = None

    def abort(self) -> None:
        if self._status is not None:
            self._status.stop()
        self._current = None


# The publishers whose signature a bundle must carry (aotc.bundle.signing).
public_key_option = click.option(
    "--public-key", "public_keys", multiple=True, type=click.Path(path_type=Path), metavar="PEM",
    callback=lambda ctx, param, keys: keys or None,  # none given: the library reads AOTC_PUBLIC_KEYS
    help="A publisher's public key (repeatable): the bundle must carry a signature by one of them over exactly "
         "its files (aotc sign), else nothing from it is used [default: the keys AOTC_PUBLIC_KEYS lists].")

# Tensor classes a bundle may make aotc import (besides torch's and torchao's own).
trust_option = click.option(
    "--trust", "trusted", multiple=True, metavar="MODULE:CLASS",
    help="Trust this tensor subclass (repeatable): aotc imports its module to rebuild the bundle's tensors "
         "of that class. torch's and torchao's own classes are trusted already.")
