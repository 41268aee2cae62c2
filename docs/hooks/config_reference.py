"""The experiment config's reference, generated from its schema (:class:`fltest.config.schema.ExperimentConfig`).

:func:`config_sections` walks the schema from the top: every field of every model it reaches, in
unions too (a partition method, a strategy, a kind of run), with its type, default and description.
:func:`render` prints them as Markdown. ``tests/test_docs.py`` uses the same walk to check that every
field has a description.
"""

from __future__ import annotations

import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import annotated_types
import yaml
from markdown_table import code, table
from pydantic import BaseModel, Tag
from pydantic.fields import FieldInfo


@dataclass(frozen=True)
class Row:
    """One key of a section: its name, type, default (``required`` when it has none) and description."""

    key: str
    type: str
    default: str
    description: str


@dataclass(frozen=True)
class Section:
    """One mapping of the config: its key path, the variant of a union it is (``""`` if none), its model, its keys."""

    path: str
    variant: str
    model: type[BaseModel]
    rows: tuple[Row, ...]

    @property
    def anchor(self) -> str:
        """The section's id on the page."""
        text = f"{self.path}-{self.variant}" if self.variant else self.path or "top-level"
        return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")

    @property
    def title(self) -> str:
        """The section's heading."""
        where = code(self.path) if self.path else "The top level"
        return f"{where}: {code(self.variant)}" if self.variant else where


def _models_in(annotation: Any) -> list[tuple[str, type[BaseModel]]]:
    """The models a field's type holds, each with its variant label (``""`` for a single model)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [("", annotation)]
    if origin is typing.Annotated:
        inner = _models_in(args[0])
        tags = [meta.tag for meta in args[1:] if isinstance(meta, Tag)]
        return [(tags[0], model) for _, model in inner] if tags and len(inner) == 1 else inner
    if origin in (typing.Union, types.UnionType):
        members = [found for arg in args for found in _models_in(arg)]
        return [(label or _literal_label(model), model) for label, model in members] if len(members) > 1 else members
    if origin is list:
        return _models_in(args[0])
    return []


def _literal_label(model: type[BaseModel]) -> str:
    """A union member's label without a tag: the value of its first field typed as a literal (``fedadam``)."""
    for field in model.model_fields.values():
        if typing.get_origin(field.annotation) is typing.Literal:
            return str(typing.get_args(field.annotation)[0])
    return model.__name__


def _constraint(meta: Any) -> str:
    """One constraint of a type in words, or ``""`` for metadata that is no constraint a reader needs."""
    bounds = {
        annotated_types.Gt: ("gt", ">"),
        annotated_types.Ge: ("ge", "≥"),
        annotated_types.Lt: ("lt", "<"),
        annotated_types.Le: ("le", "≤"),
    }
    for kind, (attribute, sign) in bounds.items():
        if isinstance(meta, kind):
            return f"{sign} {getattr(meta, attribute)}"
    if isinstance(meta, annotated_types.MinLen):
        return f"at least {meta.min_length}"
    if isinstance(meta, FieldInfo):
        return ", ".join(filter(None, map(_constraint, meta.metadata)))
    pattern = getattr(meta, "pattern", None)
    return f"matching {code(pattern)}" if isinstance(pattern, str) else ""


NAMES = {str: "text", int: "integer", float: "number", bool: "true or false", Path: "path", type(None): "null"}


def type_name(annotation: Any, metadata: typing.Sequence[Any] = ()) -> str:
    """A field's type in words: ``number > 0``, ``list of integer > 0``, ``'logreg' or 'mlp'``, ``mapping``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_name(args[0], [*args[1:], *metadata])
    constraints = ", ".join(filter(None, map(_constraint, metadata)))
    if origin is typing.Literal:
        name = " or ".join(code(str(value)) for value in args)
    elif origin in (typing.Union, types.UnionType):
        members = [arg for arg in args if arg is not type(None)]
        models = _models_in(annotation)
        name = "mapping, one of the variants below" if len(models) > 1 else " or ".join(map(type_name, members))
        name += " or null" if len(members) < len(args) else ""
    elif origin is list:
        name = f"list of {type_name(args[0])}"
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        name = "mapping"
    else:
        name = NAMES.get(annotation, getattr(annotation, "__name__", str(annotation)))
    return f"{name} ({constraints})" if constraints else name


def _flow(value: Any) -> str:
    """A default as YAML in one line."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, Path):
        value = str(value)
    dumped = yaml.safe_dump(value, default_flow_style=True, width=10**6, allow_unicode=True, sort_keys=False)
    return dumped.strip().removesuffix("\n...")


def _row(key: str, field: FieldInfo) -> Row:
    """The row of one field."""
    default = "required" if field.is_required() else code(_flow(field.get_default(call_default_factory=True)))
    return Row(key, type_name(field.annotation, field.metadata), default, field.description or "")


def config_sections(model: type[BaseModel], path: str = "", variant: str = "") -> list[Section]:
    """Every section of the config under ``model`` at key ``path``: its own first, then those its fields lead to."""
    rows, nested = [], []
    fields = model.model_fields.items()
    for key, field in sorted(fields, key=lambda item: typing.get_origin(item[1].annotation) is not typing.Literal):
        rows.append(_row(key, field))
        child = f"{path}.{key}" if path else key
        if typing.get_origin(field.annotation) is list and _models_in(field.annotation):
            child += "[]"
        for label, submodel in _models_in(field.annotation):
            nested += config_sections(submodel, child, " ".join(filter(None, [variant if path else "", label])))
    return [Section(path, variant, model, tuple(rows)), *nested]


def render(model: type[BaseModel] | None = None) -> str:
    """The config reference as Markdown: a table of keys a section, the top level first."""
    if model is None:
        from fltest.config.schema import ExperimentConfig

        model = ExperimentConfig
    parts = []
    for section in config_sections(model):
        doc = (section.model.__doc__ or "").strip().split("\n\n")[0]
        parts.append(f"## {section.title} {{#{section.anchor}}}\n\n{' '.join(doc.split())}\n")
        rows = [(code(row.key), row.type, row.default, row.description) for row in section.rows]
        parts.append(table(["key", "type", "default", "description"], rows))
    return "\n".join(parts)
