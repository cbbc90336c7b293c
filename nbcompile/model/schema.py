"""The JSON schema of ``Report.to_json()``, generated from the Report dataclasses (``json_schema``),
and its file (``write_schema``: ``nbcompile/schema/report.schema.json``, ``make schema``).

A test keeps the file and the classes in step.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
import types
import typing
from typing import Any, Literal

from .report import SCHEMA_PATH, Report

_DERIVED = {
    "schema_version": {"type": "integer"},
    "graph_count": {"type": "integer", "minimum": 0},
    "break_count": {"type": "integer", "minimum": 0},
    "splits": {"type": "integer", "minimum": 0},
    "counts_said": {"type": "string"},
    "recompile_count": {"type": "integer", "minimum": 0},
    "frame_count": {"type": "integer", "minimum": 0},
    "compile_time_s": {"type": "number", "minimum": 0},
    "result": {"type": ["string", "null"]},
}

#: Keys ``Report.to_json`` adds to a dataclass's own (by the dataclass's name).
_DERIVED_OF = {
    # each guard as the views say it (``render.guard_text``): ``x is the same object``, never ``___check_obj_id``
    "Frame": {"guards_said": {"type": "array", "items": {"type": "string"}}},
}


def _type_schema(tp: Any, defs: dict[str, Any]) -> dict[str, Any]:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:  # Optional[X], X | None, X | Y
        inner = [a for a in args if a is not type(None)]
        parts = [_type_schema(a, defs) for a in inner]
        schema = parts[0] if len(parts) == 1 else (
            {"type": [p["type"] for p in parts]} if all(set(p) == {"type"} for p in parts) else {"anyOf": parts})
        if len(inner) == len(args):
            return schema
        if "type" in schema:
            kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            nullable = {**schema, "type": [*kinds, "null"]}
            if "enum" in schema:
                nullable["enum"] = [*schema["enum"], None]
            return nullable
        return {"anyOf": [schema, {"type": "null"}]}
    if origin is Literal:
        literal_types = {str: "string", int: "integer", bool: "boolean"}
        json_types = {literal_types[type(a)] for a in args}
        if len(json_types) != 1:
            raise TypeError(f"no JSON schema for {tp!r}")
        return {"type": json_types.pop(), "enum": list(args)}
    if origin is list:
        return {"type": "array", "items": _type_schema(args[0], defs)}
    if origin is dict:
        return {"type": "object", "additionalProperties": _type_schema(args[1], defs)}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        name = tp.__name__
        if name not in defs:
            defs[name] = {}  # reserve against recursion
            defs[name] = _dataclass_schema(tp, defs)
        return {"$ref": f"#/$defs/{name}"}
    simple = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if tp in simple:
        return {"type": simple[tp]}
    raise TypeError(f"no JSON schema for {tp!r}")


def _dataclass_schema(cls: type, defs: dict[str, Any]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))
    props = {}
    for f in dataclasses.fields(cls):
        if f.name == "result":
            continue
        props[f.name] = _type_schema(hints[f.name], defs)
    props.update(_DERIVED_OF.get(cls.__name__, {}))
    return {
        "type": "object",
        "properties": props,
        "required": sorted(props),
        "additionalProperties": False,
    }


def json_schema() -> dict[str, Any]:
    """The JSON schema of ``Report.to_json()``, derived from the dataclasses."""
    defs: dict[str, Any] = {}
    root = _dataclass_schema(Report, defs)
    root["properties"].update(_DERIVED)
    root["required"] = sorted(root["properties"])
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://nbcompile.dev/schema/report.schema.json",
        "title": "nbcompile Report",
        **root,
        "$defs": dict(sorted(defs.items())),
    }


def write_schema(path: pathlib.Path = SCHEMA_PATH) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(json_schema(), indent=2) + "\n")

