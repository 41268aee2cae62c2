"""Markdown tables for the generated reference pages."""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence


def cell(text: str) -> str:
    """``text`` made safe for a table cell: one line; ``|``, ``<``, ``>`` and ``&`` outside code spans escaped."""
    parts = " ".join(text.split()).split("`")
    escaped = (part if i % 2 else html.escape(part, quote=False).replace("|", "\\|") for i, part in enumerate(parts))
    return "`".join(escaped)


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table of ``rows`` under ``header``; each cell passes through :func:`cell`."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def code(value: str) -> str:
    """``value`` as a code span (longer fences when it holds backticks)."""
    fence = "``" if "`" in value else "`"
    padded = f" {value} " if fence == "``" else value
    return f"{fence}{padded}{fence}" if value else ""
