"""Every shell block of the tutorials and how-to guides is run by a test as written, or marked as one that cannot
run here and listed below (tests/doc_blocks.py)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.doc_blocks import doc_block, doc_blocks, readme_command, run_block
from tests.tools.checkout import REPO

# The blocks these machines cannot run, by page and the reason the page gives.
NOT_RUN = [
    ("docs/how-to/ray-by-hand.md", "a template, its <...> are each node's own values"),
    ("docs/how-to/supernodes-elsewhere.md", "a SuperLink on another machine (the connection lab of step 1)"),
    ("docs/how-to/supernodes-elsewhere.md", "a SuperLink on another machine (superlink.example.org)"),
    ("docs/how-to/supernodes-elsewhere.md", "a SuperLink on another machine (superlink.example.org)"),
    ("docs/how-to/upgrading.md", "git pull needs the project's remote"),
]
RUNNERS = sorted(path for path in (REPO / "tests").rglob("*.py") if path.name != "doc_blocks.py")


def _commands(text: str) -> list[str]:
    """A block's commands without their comments (a ``#`` after two spaces) and blank lines."""
    return [re.split(r"\s{2,}#", line)[0].strip() for line in text.splitlines() if line.strip()]


def test_every_shell_block_is_marked():
    unmarked = [(block.page, block.text.splitlines()[0]) for block in doc_blocks() if block.kind is None]
    assert unmarked == [], "mark each with <!-- block: <id> --> or <!-- not run here: <why> --> (tests/doc_blocks.py)"


def test_the_blocks_not_run_here_are_these():
    assert [(b.page, b.value) for b in doc_blocks() if b.kind == "not run here"] == NOT_RUN


def test_every_block_is_run_by_a_test_that_names_it():
    ids = [block.value for block in doc_blocks() if block.kind == "block"]
    assert len(ids) == len(set(ids)), ids
    sources = {path: path.read_text() for path in RUNNERS}
    runners = {block_id: [path.name for path, text in sources.items() if f'"{block_id}"' in text] for block_id in ids}
    assert [block_id for block_id, names in runners.items() if not names] == [], runners


def test_readme_command_1_is_the_first_experiment_s_install_and_run():
    """The pythons tier runs README command 1: so it runs the tutorial's first two blocks."""
    steps = _commands(doc_block("first-experiment/install")) + _commands(doc_block("first-experiment/run"))
    assert readme_command("Run the example") == " && ".join(steps)


def test_ci_runs_the_readme_s_test_command_which_the_tests_page_gives():
    (command,) = _commands(doc_block("tests/run-tiers"))
    assert readme_command("Run the tests") == command
    assert (REPO / ".ci" / "run").read_text().rstrip().splitlines()[-1] == command


def test_a_key_pair_for_a_supernode_as_the_page_makes_it(tmp_path):
    if shutil.which("ssh-keygen") is None:  # the pythons tier's Debian 13 container has no openssh-client
        pytest.skip("no ssh-keygen on this machine (openssh-client)")
    result = run_block(doc_block("supernodes-elsewhere/key"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "keys" / "id_ecdsa").stat().st_mode & 0o777 == 0o600
    public = (tmp_path / "keys" / "id_ecdsa.pub").read_text()
    assert public.startswith("ecdsa-sha2-nistp384 "), public  # P-384, as the SuperLink's auth needs
    check = subprocess.run(["ssh-keygen", "-l", "-f", str(tmp_path / "keys" / "id_ecdsa.pub")], capture_output=True)
    assert check.returncode == 0 and b"384" in check.stdout, check


def test_no_block_to_run_holds_a_placeholder():
    """A ``<run-id>`` in a block a newcomer copies is bash's redirection from a file: such a line belongs in
    the prose around the block (or the block is a template, not run here)."""
    placeholders = {
        (block.page, line)
        for block in doc_blocks()
        if block.kind == "block"
        for line in _commands(block.text)
        if re.search(r"<[a-z][a-z-]*>", line)
    }
    assert placeholders == set()
