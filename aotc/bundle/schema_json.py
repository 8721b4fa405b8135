"""(De)serialization of the bundle's schema dataclasses (aotc.bundle.schema, aotc.bundle.regions_schema).

`to_json(obj)` writes a dataclass tree as plain JSON values; `from_json(cls, data, where)`
reads one and checks every field against its type hints, naming the file and field of any
problem; `json_schema(cls)` gives its JSON Schema, described by the classes' docstrings.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal, Union

from aotc.errors import BundleError


def to_json(obj: Any) -> Any:
    """A dataclass tree as plain JSON values. A field added to the format after its
    version (marked `OMIT_DEFAULT`) is left out while it holds its default, so that a
    bundle that does not use it stays readable by the aotc before it."""
    if dataclasses.is_dataclass(obj):
        return {
            f.name: to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)
            if not (f.metadata.get(OMIT_DEFAULT) and getattr(obj, f.name) == _default(f))
        }
    if isinstance(obj, dict):
        return {str(k): to_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_json(v) for v in obj]
    return obj


OMIT_DEFAULT = "omit_default"


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _check(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        errors = []
        for option in typing.get_args(tp):
            try:
                return _check(option, value, where)
            except BundleError as e:
                errors.append(e)
        raise BundleError(f"{where}: expected {_type_name(tp)}, found {value!r:.60}")
    if tp is type(None):
        if value is not None:
            raise BundleError(f"{where}: expected null, found {value!r:.60}")
        return None
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise BundleError(
                f"{where}: expected one of {list(typing.get_args(tp))}, found {value!r:.60}"
            )
        return value
    if origin is list:
        if not isinstance(value, list):
            raise BundleError(f"{where}: expected a list, found {type(value).__name__}")
        (item,) = typing.get_args(tp)
        return [_check(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise BundleError(f"{where}: expected an object, found {type(value).__name__}")
        _, item = typing.get_args(tp)
        return {k: _check(item, v, f"{where}.{k}") for k, v in value.items()}
    if dataclasses.is_dataclass(tp):
        return _from_dict(tp, value, where)
    if tp is bool:
        if not isinstance(value, bool):
            raise BundleError(f"{where}: expected true/false, found {value!r:.60}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise BundleError(f"{where}: expected an integer, found {value!r:.60}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BundleError(f"{where}: expected a number, found {value!r:.60}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise BundleError(f"{where}: expected a string, found {value!r:.60}")
        return value
    raise TypeError(f"schema type {tp} not supported")  # a bug in this module


def _hints(cls: type) -> dict[str, Any]:
    # in the globals of the class's own module (aotc.bundle.regions_schema's classes name this one's)
    return typing.get_type_hints(cls)


def _from_dict(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise BundleError(f"{where}: expected an object, found {type(data).__name__}")
    hints = _hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise BundleError(f"{where}: missing field '{f.name}'")
            continue
        kwargs[f.name] = _check(hints[f.name], data[f.name], f"{where}.{f.name}")
    unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
    if unknown:
        raise BundleError(f"{where}: unknown field(s) {sorted(unknown)}")
    return cls(**kwargs)


def from_json(cls: type, data: Any, where: str) -> Any:
    """Build `cls` from parsed JSON, raising BundleError that names `where` and the field."""
    return _from_dict(cls, data, where)


def json_schema(cls: type) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a schema dataclass."""
    defs: dict[str, Any] = {}

    def schema_of(tp: Any) -> dict[str, Any]:
        origin = typing.get_origin(tp)
        if tp is Any:
            return {"description": "any JSON value"}
        if origin in (Union, types.UnionType):
            return {"anyOf": [schema_of(a) for a in typing.get_args(tp)]}
        if tp is type(None):
            return {"type": "null"}
        if origin is Literal:
            return {"enum": list(typing.get_args(tp))}
        if origin is list:
            return {"type": "array", "items": schema_of(typing.get_args(tp)[0])}
        if origin is dict:
            return {"type": "object", "additionalProperties": schema_of(typing.get_args(tp)[1])}
        if dataclasses.is_dataclass(tp):
            if tp.__name__ not in defs:
                defs[tp.__name__] = {}  # placeholder against recursion
                defs[tp.__name__] = object_schema(tp)
            return {"$ref": f"#/$defs/{tp.__name__}"}
        return {"type": {bool: "boolean", int: "integer", float: "number", str: "string"}[tp]}

    def object_schema(tp: type) -> dict[str, Any]:
        hints = _hints(tp)
        fields = dataclasses.fields(tp)
        return {
            "type": "object",
            "description": " ".join((tp.__doc__ or "").split()),
            "properties": {f.name: schema_of(hints[f.name]) for f in fields},
            "required": [
                f.name
                for f in fields
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            ],
            "additionalProperties": False,
        }

    top = object_schema(cls)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": cls.__name__,
        **top,
        "$defs": defs,
    }
