"""The documentation: its reference pages are generated from the code, and the code gives them what they need."""

from __future__ import annotations

import inspect

from pydantic import BaseModel

from fltest.config import partitions, runs, schema, strategies
from fltest.config.schema import ExperimentConfig
from tests.docs_hooks import docs_hook


def _sections():
    return docs_hook("config_reference").config_sections(ExperimentConfig)


def test_every_config_field_has_a_description():
    """The config reference prints each field's description: a field without one would be a blank cell."""
    missing = [
        f"{section.path or '(top level)'}{f' ({section.variant})' if section.variant else ''}: {row.key}"
        for section in _sections()
        for row in section.rows
        if not row.description.strip()
    ]
    assert not missing, f"config fields without a description (Field(description=...)): {missing}"


def test_the_config_reference_reaches_every_model_of_the_schema():
    """Every model of fltest.config (a partition method, a strategy, a kind of run...) has its section."""
    reached = {section.model for section in _sections()}
    defined = {
        model
        for module in (schema, runs, partitions, strategies)
        for name, model in inspect.getmembers(module, inspect.isclass)
        if issubclass(model, BaseModel) and model.__module__ == module.__name__ and not name.startswith("_")
    }
    assert defined - reached == set()
