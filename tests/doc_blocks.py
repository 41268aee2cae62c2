"""The shell blocks of the tutorials and how-to guides, as a newcomer copies them, and a folder to run them in.

Every ``bash`` block of docs/tutorials/ and docs/how-to/ follows a mark, an HTML comment a reader of the
source sees and the rendered page hides:

- ``<!-- block: <id> -->``: a test runs it as written; it gets the text with :func:`doc_block` (so a change
  of the page is what runs) and names the id in its source (tests/test_doc_blocks.py checks both);
- ``<!-- not run here: <why> -->``: it needs what these machines lack (a GPU, a real lab's SSH, a
  remote); tests/test_doc_blocks.py lists every such block.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.tools.checkout import REPO, copy_checkout

PAGE_FOLDERS = ("docs/tutorials", "docs/how-to")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)
MARK = re.compile(r"<!-- (block|not run here): (.+?) -->\n\n?\Z")
SHELLS = {"bash", "sh", "shell", "console"}


@dataclass(frozen=True)
class DocBlock:
    """One shell block of a page: its text, and its mark's kind (``block``, ``not run here`` or ``None``) and value."""

    page: str  # relative to the repository
    kind: str | None
    value: str | None  # the id of a ``block``, the reason of a ``not run here``
    text: str


def doc_blocks() -> list[DocBlock]:
    """Every shell block of the tutorials and how-to guides, in page order."""
    found = []
    for folder in PAGE_FOLDERS:
        for page in sorted((REPO / folder).glob("*.md")):
            source = page.read_text()
            for fence in FENCE.finditer(source):
                if fence.group(1) not in SHELLS:
                    continue
                mark = MARK.search(source[: fence.start()])
                found.append(
                    DocBlock(
                        page=str(page.relative_to(REPO)),
                        kind=mark.group(1) if mark else None,
                        value=mark.group(2) if mark else None,
                        text=fence.group(2),
                    )
                )
    return found


def doc_block(block_id: str) -> str:
    """The text of the block marked ``<!-- block: <block_id> -->``."""
    (text,) = [block.text for block in doc_blocks() if block.kind == "block" and block.value == block_id]
    return text


def block_steps(text: str) -> list[str]:
    """A block's commands one at a time, each after the block's ``cd`` lines above it: run in order, they do what
    the block does, and a test can look between them (what ``--check`` left, a run's end before the next line)."""
    steps, directories = [], []
    for line in re.sub(r"\\\n", "", text).splitlines():  # a line continued with a backslash is one command
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.startswith("cd "):
            directories.append(line)
        else:
            steps.append("\n".join([*directories, line]))
    return steps


def readme_command(heading: str) -> str:
    """The one line of the README's first ``bash`` block under ``## <heading>``, as a user copies it."""
    section = (REPO / "README.md").read_text().split(f"## {heading}\n", 1)[1]
    (block,) = re.findall(r"```bash\n(.*?)\n```", section.split("\n## ", 1)[0], re.S)[:1]
    return block.strip()


def user_checkout(destination: Path) -> Path:
    """A copy of the checkout's files (what a clone holds) in ``destination``, its ``.venv`` this test session's
    (a link): the repository's folder as a user has it after the tutorial's install."""
    copy_checkout(destination)
    (destination / ".venv").symlink_to(Path(sys.prefix))
    return destination


def run_block(text: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600):
    """Run a block's lines with bash in ``cwd``, stopping at the first that fails (``set -e``), output captured."""
    return subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", text],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
