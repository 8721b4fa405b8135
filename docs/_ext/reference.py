"""The reference pages, written from the code at every build so they cannot drift from it:
the CLI from its Click commands, the bundle format from the schema dataclasses, and the
errors and exit codes from aotc.errors. They go to docs/reference/ (not in git)."""

from __future__ import annotations

import dataclasses
import inspect
import re
import types
import typing
from pathlib import Path

import click


def cli_page() -> str:
    from aotc.cli.main import cli

    ctx = click.Context(cli, info_name="aotc")
    out = ["# Command line", "", "Generated from aotc's Click commands. Every command takes `-h`/`--help`, "
           "and those a CI parses take `--json`.", "", "```text", cli.get_help(ctx), "```", ""]
    for name in cli.list_commands(ctx):
        command = cli.get_command(ctx, name)
        sub = click.Context(command, info_name=name, parent=ctx)
        out += [f"## aotc {name}", "", "```text", command.get_help(sub), "```", ""]
    return "\n".join(out)


def _type_name(tp) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Literal:
        return " or ".join(repr(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    if origin is not None:
        return f"{getattr(origin, '__name__', str(origin))}[{', '.join(_type_name(a) for a in args)}]"
    return "None" if tp is type(None) else getattr(tp, "__name__", str(tp))


def _field_comments(cls: type) -> dict[str, str]:
    """The `#` comments on and above each field in the class's source: what a field means
    is often said there rather than in the docstring."""
    comments: dict[str, str] = {}
    above: list[str] = []
    for line in inspect.getsource(cls).splitlines()[1:]:
        text = line.strip()
        if text.startswith("#"):
            above.append(text.lstrip("# "))
            continue
        name = re.match(r"(\w+)\s*:", text)
        if name and not text.startswith(("def ", "return")):
            trailing = text.split("  # ", 1)[1:] if "  # " in text else []
            comments[name.group(1)] = " ".join(above + trailing)
        above = []
    return comments


def _schema_classes(root: type) -> list[type]:
    """`root` and every dataclass its fields reach, in the order they are first met."""
    seen: list[type] = []

    def visit(cls: type) -> None:
        if cls in seen:
            return
        seen.append(cls)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            for arg in _leaves(hints[f.name]):
                if dataclasses.is_dataclass(arg):
                    visit(arg)

    visit(root)
    return seen


def _leaves(tp) -> list:
    args = typing.get_args(tp)
    return [leaf for a in args for leaf in _leaves(a)] if args else [tp]


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return f"`{f.default!r}`"
    if f.default_factory is not dataclasses.MISSING:
        return f"`{f.default_factory()!r}`"
    return "required"


def bundle_page() -> str:
    from aotc.bundle import schema
    from aotc.bundle.regions_schema import RegionsManifest

    out = ["# Bundle format", "",
           f"Generated from `aotc/bundle/schema.py` and the modules it imports. Format version "
           f"{schema.FORMAT_VERSION}; bundles from version {schema.OLDEST_FORMAT_READ} on are read. "
           "Each JSON file is one dataclass below, checked field by field on read; "
           "`tests/golden/schema/` holds the same as JSON Schema.", ""]
    files = [("manifest.json", schema.Manifest), ("signature.json", schema.Signature),
             ("metadata.json", schema.Metadata), ("regions.json (a regional bundle)", RegionsManifest)]
    done: set[type] = set()
    for file, root in files:
        out += [f"## {file}", ""]
        for cls in _schema_classes(root):
            if cls in done:
                continue
            done.add(cls)
            hints = typing.get_type_hints(cls)
            doc = inspect.getdoc(cls) or ""
            notes = _field_comments(cls)
            out += [f"### {cls.__name__}", "", doc, "", "| field | type | default | notes |", "| --- | --- | --- | --- |"]
            out += [f"| `{f.name}` | {_type_name(hints[f.name])} | {_default(f)} | {notes.get(f.name, '')} |"
                    for f in dataclasses.fields(cls)]
            out.append("")
    return "\n".join(out)


def errors_page() -> str:
    from aotc import errors

    classes = [c for _, c in inspect.getmembers(errors, inspect.isclass) if c.__module__ == errors.__name__]
    classes.sort(key=lambda c: [k.__name__ for k in reversed(c.__mro__[:-1])])
    out = ["# Errors and exit codes", "", "Generated from `aotc/errors.py`.", "",
           inspect.getdoc(errors) or "", "",
           "| exception | base | exit code | when |", "| --- | --- | --- | --- |"]
    for c in classes:
        base = c.__bases__[0].__name__
        code = "(a warning)" if issubclass(c, Warning) else getattr(c, "exit_code", 2)
        when = " ".join((inspect.getdoc(c) or "").split())
        out.append(f"| `{c.__name__}` | `{base}` | {code} | {when} |")
    return "\n".join(out) + "\n"


def write(folder: Path) -> None:
    folder.mkdir(exist_ok=True)
    for name, page in (("cli", cli_page), ("bundle-format", bundle_page), ("errors", errors_page)):
        text = page()
        path = folder / f"{name}.md"
        if not path.exists() or path.read_text() != text:  # unchanged pages keep Sphinx's cache
            path.write_text(text)
