"""The documentation: its reference pages are generated from the code, and the code gives them what they need."""

from __future__ import annotations

import inspect
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from fltest.config import partitions, runs, schema, strategies
from fltest.config.schema import ExperimentConfig
from fltest.exit_codes import ExitCode
from tests.docs_hooks import docs_hook

REPOSITORY = Path(__file__).resolve().parent.parent


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


def test_the_site_builds_strict(built_site):
    """``mkdocs build --strict``, as CI runs it: every page, link and anchor, every generated reference page."""
    assert (built_site / "reference" / "config" / "index.html").read_text().count("<table>") > 10
    assert (built_site / "explanation" / "security.png").read_bytes().startswith(b"\x89PNG")


def test_the_exit_codes_the_lab_reports_are_fltests():
    """The exit code reference is ExitCode; run.yml's words for fltest's codes and the interrupt plugin's code agree."""
    report = yaml.safe_load((REPOSITORY / "ansible/roles/fltest_run/tasks/report.yml").read_text())
    tasks = [task for task in report if "fltest_run_exit_meanings" in task.get("vars", {})]
    meanings = tasks[0]["vars"]["fltest_run_exit_meanings"]
    assert set(meanings) == {ExitCode.FAILED, ExitCode.BAD_INPUT, ExitCode.INTERRUPTED}
    plugin = (REPOSITORY / "ansible/callback_plugins/fltest_interrupt.py").read_text()
    assert f"INTERRUPTED_EXIT_CODE = {int(ExitCode.INTERRUPTED)}\n" in plugin


def test_every_ansible_name_the_pages_give_exists():
    """A role, variable or playbook setting named in a hand-written page is one the Ansible code has (a rename shows)."""
    in_ansible = {
        name
        for path in (REPOSITORY / "ansible").rglob("*")
        if path.is_file() and path.suffix in (".yml", ".py", ".cfg")
        for name in re.findall(r"\bfltest_[a-z0-9_]+", path.read_text())
    }
    named = {
        (page.relative_to(REPOSITORY).as_posix(), name)
        for page in [*(REPOSITORY / "docs").rglob("*.md"), REPOSITORY / "README.md", REPOSITORY / "ansible/README.md"]
        for name in re.findall(r"\bfltest_[a-z0-9_]+", page.read_text())
    }
    assert sorted((page, name) for page, name in named if name not in in_ansible) == []


def test_the_cli_reference_holds_nothing_of_the_building_machine_and_shows_placeholders_as_text():
    markdown = pytest.importorskip("markdown", reason="the docs extra is not installed (pip install -e '.[docs]')")

    page = docs_hook("cli_reference").render()
    repository = str(Path(__file__).resolve().parents[1])
    assert repository not in page  # --compose-dir's default is the repository's compose/, said as such
    assert "| `compose` |" in page
    rendered = markdown.markdown(page, extensions=["tables"])
    assert "&lt;out&gt;/&lt;service&gt;/" in rendered  # fltest-flower files' help, not an HTML tag
    fltest_flower = page.split("## `fltest-flower`", 1)[1].split("\n\n", 2)[1]
    assert fltest_flower.startswith("The Flower deployment emulation")


def test_no_table_swallows_the_paragraph_after_it():
    """Markdown continues a table into the next line unless a blank line ends it: a paragraph after a table
    without one renders as more rows."""
    docs = Path(__file__).resolve().parents[1] / "docs"
    row = re.compile(r"^\|[\s:-]")
    swallowed = []
    for page in sorted(docs.rglob("*.md")):
        lines = page.read_text().splitlines()
        swallowed += [
            f"{page.relative_to(docs)}:{number + 2}"
            for number, (line, following) in enumerate(zip(lines, lines[1:]))
            if row.match(line) and following.strip() and not following.startswith("|")
        ]
    assert swallowed == []


def test_every_ansible_role_variable_has_a_sentence_of_its_own():
    """The role reference prints each variable's comment (docs/hooks/settings_reference.py): a variable right
    below another, with no comment of its own, would be described only by a pointer to the one above."""
    settings = docs_hook("settings_reference")
    shared = [
        group.names
        for defaults in sorted(settings.ROLES_DIR.glob("*/defaults/main.yml"))
        for group in settings.commented_settings(defaults.read_text(), settings.YAML_SETTING).groups
        if len(group.names) > 1 or not group.comment
    ]
    assert shared == []


def test_each_role_s_intro_says_it_once():
    """A role's intro in the reference is its defaults' header or its meta description, never both (they overlap)."""
    intros = [block.split("\n\n")[1] for block in docs_hook("settings_reference").render_roles().split("\n## ")]
    repeated = [intro for intro in intros if intro.lower().count(" ".join(intro.lower().split()[:2])) > 1]
    assert len(intros) >= 15 and repeated == []


def test_the_port_table_is_the_kit_s_ports():
    """docs/reference/ports.md's table between lab nodes: Ray's ports are ray_start's PORTS and WORKER_PORTS, the
    relay's and the Fleet proxy's the role default and the kit value that set them; no port is missing or extra."""
    from deploy.kit import KIT
    from deploy.node.ray_start import PORTS, WORKER_PORTS

    repository = Path(__file__).resolve().parents[1]
    page = (repository / "docs" / "reference" / "ports.md").read_text()
    table = page.split("## Between lab nodes", 1)[1].split("\n## ", 1)[0]
    cells = [row.split("|")[1] for row in table.splitlines() if re.match(r"\| \d", row)]
    documented = {tuple(int(n) for n in port.split("/")[0].split("-")) for cell in cells for port in cell.split(",")}
    relay = yaml.safe_load((repository / "ansible" / "roles" / "fltest_images" / "defaults" / "main.yml").read_text())
    expected = {(port,) for port in PORTS.values()} | {WORKER_PORTS}
    expected |= {(relay["fltest_images_relay_port"],), (KIT.fleet_port,)}
    assert documented == expected


def test_git_ignores_every_inventory_but_the_sample():
    """first-lab.md: a lab's inventory (its addresses) stays out of commits; the sample is tracked."""
    repository = Path(__file__).resolve().parents[1]
    if not (repository / ".git").exists():
        pytest.skip("not a git checkout (the pythons tier's copy of the files)")
    paths = ["ansible/inventory/mylab/hosts.yml", "ansible/inventory/lab2/group_vars/all.yml"]
    sample = "ansible/inventory/sample/hosts.yml"
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", *paths, sample], cwd=repository, capture_output=True, text=True
    ).stdout.split()
    assert ignored == paths
