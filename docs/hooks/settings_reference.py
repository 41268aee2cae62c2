"""Reference tables of commented settings files: the Ansible roles' ``defaults/main.yml`` and the kit's env files.

Both kinds of file put a comment above each setting (or above a group of settings that share it).
:func:`commented_settings` reads them as written; :func:`render_roles` and :func:`render_env_files`
print them as Markdown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from markdown_table import code, table

REPOSITORY = Path(__file__).resolve().parents[2]
ROLES_DIR = REPOSITORY / "ansible" / "roles"
ENV_FILES = ("deploy/kit.env", "compose/.env", "compose/flower.env")
YAML_SETTING = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*):(.*)$")
ENV_SETTING = re.compile(r"^([A-Z_][A-Z0-9_]*)=(.*)$")


@dataclass
class SettingGroup:
    """Settings that share one comment: their names, in order, and the comment's text."""

    comment: str
    names: list[str] = field(default_factory=list)


@dataclass
class SettingsFile:
    """A settings file read: its header (the comment above a bare ``#`` line at the top) and its groups."""

    header: str
    groups: list[SettingGroup]


def commented_settings(text: str, pattern: re.Pattern[str]) -> SettingsFile:
    """The settings ``pattern`` finds at the start of lines of ``text``, grouped under the comment lines above them.

    A setting right below another (no comment between) joins its group. In a comment block, what stands above
    its last bare ``#`` line is a note on the file, not the next setting's comment: the notes make the header,
    and so does a comment block that a blank line ends before the first setting.
    """
    notes, groups, comment = [], [], []
    for line in text.splitlines():
        if line.startswith("#"):
            comment.append(line[1:].strip())
            continue
        match = pattern.match(line)
        if match:
            if "" in comment:
                cut = len(comment) - comment[::-1].index("")
                notes.append(" ".join(filter(None, comment[:cut])))
                comment = comment[cut:]
            if comment or not groups:
                groups.append(SettingGroup(" ".join(comment)))
            groups[-1].names.append(match.group(1))
        elif not line.strip() and comment and not groups:
            notes.append(" ".join(comment))
        if not line.startswith((" ", "-")) or match:
            comment = []
    return SettingsFile(" ".join(notes), groups)


def _yaml_value(value: object) -> str:
    """A role default in one line: a string as written, anything else as YAML."""
    if isinstance(value, str):
        return " ".join(value.split())
    dumped = yaml.safe_dump(value, default_flow_style=True, width=10**6, allow_unicode=True, sort_keys=False)
    return dumped.strip().removesuffix("\n...")


def _role_description(role: Path) -> str:
    """The role's description in its meta/main.yml (galaxy_info), if any."""
    meta = role / "meta" / "main.yml"
    info = (yaml.safe_load(meta.read_text()) or {}).get("galaxy_info", {}) if meta.is_file() else {}
    return str(info.get("description", ""))


def _groups_table(settings: SettingsFile, value_of: dict[str, str]) -> str:
    """One row a setting, with its value and its group's comment (a group's later settings point to its first)."""
    rows = [
        (code(name), code(value_of[name]), group.comment if i == 0 else f"With {code(group.names[0])}, above.")
        for group in settings.groups
        for i, name in enumerate(group.names)
    ]
    return table(["setting", "default", "what it is"], rows)


def render_roles(roles_dir: Path = ROLES_DIR) -> str:
    """Every role with a ``defaults/main.yml``: its description, then each variable, its default and its comment."""
    parts = []
    for role in sorted(path.parent.parent for path in roles_dir.glob("*/defaults/main.yml")):
        text = (role / "defaults" / "main.yml").read_text()
        settings = commented_settings(text, YAML_SETTING)
        values = {name: _yaml_value(value) for name, value in (yaml.safe_load(text) or {}).items()}
        description = _role_description(role)
        # The defaults' header says what the role's meta description says, and more: one of them, not both.
        intro = settings.header or (description.rstrip(".") + "." if description else "")
        parts.append(f"## `{role.name}` {{#{role.name}}}\n\n{intro}\n\n{_groups_table(settings, values)}")
    return "\n".join(parts)


def render_env_files(files: tuple[str, ...] = ENV_FILES) -> str:
    """Each env file of the kit: its header, then each setting, its value as shipped and its comment."""
    parts = []
    for name in files:
        text = (REPOSITORY / name).read_text()
        settings = commented_settings(text, ENV_SETTING)
        values = {match.group(1): match.group(2) for match in map(ENV_SETTING.match, text.splitlines()) if match}
        anchor = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
        parts.append(f"## `{name}` {{#{anchor}}}\n\n{settings.header}\n\n{_groups_table(settings, values)}")
    return "\n".join(parts)
