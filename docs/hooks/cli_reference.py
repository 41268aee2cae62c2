"""The command line reference, generated from the commands' argparse parsers.

Each command's ``build_parser()`` gives its usage, its global options and, per subcommand, its help
and every argument with its help, choices and default.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

from markdown_table import cell, code, table

#: The commands documented, in order: the console script and the module whose build_parser() makes its parser.
COMMANDS = {
    "fltest": "fltest.cli",
    "fltest-deploy": "deploy.commands.fltest_deploy",
    "fltest-flower": "deploy.commands.fltest_flower",
}
USAGE_WIDTH = 100
REPO = Path(__file__).resolve().parents[2]


def _usage(parser: argparse.ArgumentParser) -> str:
    """The parser's usage line, wrapped at :data:`USAGE_WIDTH` whatever the terminal."""
    formatter = argparse.HelpFormatter(parser.prog, width=USAGE_WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _name(action: argparse.Action) -> str:
    """How an argument is written: its option strings with a metavar, or a positional's name."""
    if not action.option_strings:
        return action.metavar or action.dest
    takes_value = action.nargs != 0
    metavar = action.metavar or action.dest.upper()
    return ", ".join(f"{option} {metavar}" if takes_value else option for option in action.option_strings)


def _default(action: argparse.Action) -> str:
    """An argument's default, or ``""`` where it has none worth printing; a path in the repository relative to it
    (nothing of the machine that builds the site)."""
    if action.default in (None, False, argparse.SUPPRESS) or action.nargs == 0 or "default" in (action.help or ""):
        return ""
    default = Path(action.default) if isinstance(action.default, str | Path) else None
    if default is not None and default.is_absolute() and default.is_relative_to(REPO):
        return code(str(default.relative_to(REPO)))
    return code(str(action.default))


def _sentence(text: str) -> str:
    """``text`` as a sentence: a capital first, a full stop last."""
    return text[:1].upper() + text[1:] + ("" if text.endswith((".", ")")) or not text else ".")


def _help(action: argparse.Action) -> str:
    """An argument's help, with its choices."""
    text = action.help or ""
    if action.choices:
        text += ("; " if text else "") + "one of " + ", ".join(code(str(choice)) for choice in action.choices)
    return text


def _arguments(parser: argparse.ArgumentParser) -> str:
    """A table of a parser's own arguments (no help option, no subcommands), or ``""`` if it has none."""
    skipped = (argparse._HelpAction, argparse._SubParsersAction)
    actions = [action for action in parser._actions if not isinstance(action, skipped)]
    rows = [(code(_name(action)), _help(action), _default(action)) for action in actions]
    return table(["argument", "what it is", "default"], rows) if rows else ""


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """Each subcommand of ``parser``: its name, its one-line help and its parser."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            return [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return []


def render_command(prog: str, parser: argparse.ArgumentParser) -> str:
    """One command's reference: its description, usage and options, then one section a subcommand."""
    description = cell((parser.description or "").split("\n\n")[0])
    parts = [f"## `{prog}` {{#{prog}}}\n\n{description}\n\n```\n{_usage(parser)}\n```\n", _arguments(parser)]
    for name, text, sub in _subcommands(parser):
        heading = f"### `{prog} {name}` {{#{prog}-{name}}}"
        parts.append(f"{heading}\n\n{cell(_sentence(text))}\n\n```\n{_usage(sub)}\n```\n")
        parts.append(_arguments(sub))
    return "\n".join(part for part in parts if part)


def render() -> str:
    """The reference of every command in :data:`COMMANDS`."""
    parsers = {prog: importlib.import_module(module).build_parser() for prog, module in COMMANDS.items()}
    return "\n".join(render_command(prog, parser) for prog, parser in parsers.items())
