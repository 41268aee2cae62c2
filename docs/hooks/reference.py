"""MkDocs hook: the reference pages' tables and the security picture, generated from the code at build time.

A page asks for a generated part with a marker line, ``<!-- reference: NAME -->``, which
:func:`on_page_markdown` replaces by the Markdown of the generator :data:`GENERATORS` names (an
unknown name fails the build). :func:`on_files` adds the pictures drawn at build time. Nothing
generated is committed, so no reference page can drift from the code.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import cli_reference
import config_reference
import exit_codes_reference
import security_picture
import settings_reference
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

#: Marker name -> the function returning its Markdown.
GENERATORS: dict[str, Callable[[], str]] = {
    "config": config_reference.render,
    "cli": cli_reference.render,
    "exit-codes": exit_codes_reference.render,
    "ansible-roles": settings_reference.render_roles,
    "env-files": settings_reference.render_env_files,
}
#: Site path -> the function returning the picture's PNG bytes.
PICTURES: dict[str, Callable[[], bytes]] = {"explanation/security.png": security_picture.draw}
MARKER = re.compile(r"^<!-- reference: ([a-z-]+) -->$", re.MULTILINE)


def on_files(files: Files, config) -> Files:
    """Add the pictures drawn at build time to the site's files."""
    for path, draw in PICTURES.items():
        files.append(File.generated(config, path, content=draw()))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Replace each ``<!-- reference: NAME -->`` line of a page by its generated Markdown."""

    def generated(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            known = ", ".join(GENERATORS)
            raise PluginError(f"{page.file.src_uri}: unknown reference marker {name!r} (known: {known})")
        return GENERATORS[name]()

    return MARKER.sub(generated, markdown)
