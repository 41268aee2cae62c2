"""The exit code reference, generated from :class:`fltest.exit_codes.ExitCode`."""

from __future__ import annotations

from markdown_table import code, table


def render() -> str:
    """A table of every exit code with its name and meaning."""
    from fltest.exit_codes import ExitCode

    return table(["code", "name", "meaning"], [(code(str(int(c))), code(c.name), c.meaning) for c in ExitCode])
