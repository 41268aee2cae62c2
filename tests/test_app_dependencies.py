"""A Flower App's dependencies, checked in the operator's flwr before ``flwr run`` submits it: the kit installs nothing
at run time, so an App needing a package its image lacks is one line naming it and the image variant to build."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from deploy.node.app_dependencies import Unmet, app_folder, check_app, installed_version, kit_extras, unmet_requirements
from deploy.node.superlink_flwr import run_flwr

APP = Path(__file__).resolve().parent / "flower_app"  # the tests' own Flower App (flwr, numpy)
ABSENT = "fltest-no-such-package"  # installed nowhere


def _app(tmp_path: Path, *dependencies: str) -> Path:
    """A copy of the tests' App whose pyproject.toml also needs ``dependencies``."""
    folder = tmp_path / "my-app"
    shutil.copytree(APP, folder)
    pyproject = folder / "pyproject.toml"
    extra = "".join(f'    "{dependency}",\n' for dependency in dependencies)
    pyproject.write_text(pyproject.read_text().replace('    "numpy>=2.0",\n', f'    "numpy>=2.0",\n{extra}'))
    return folder


def test_the_tests_app_needs_nothing_this_environment_lacks():
    assert check_app(APP, "fltest:0.1.0") is None


def test_a_package_no_extra_has_is_one_line_naming_it_and_an_extra_to_make(tmp_path):
    folder = _app(tmp_path, f"{ABSENT}>=1.0")
    line = check_app(folder, "fltest:0.1.0")
    assert line == (
        f"flwr run: {folder}/pyproject.toml: project.dependencies: {ABSENT}>=1.0: not in the image fltest:0.1.0, and the kit "
        "installs nothing at run time; add what the App needs to an extra of FLTest's pyproject.toml (e.g. app = "
        '["<package>==<version>"]) and build that image variant: fltest-deploy build --extras app, then run the federation '
        "on it (FLTEST_IMAGE for fltest-flower up, fltest_image for cluster.yml)"
    )


def test_a_package_of_fltest_s_extras_names_the_variant_that_has_it(tmp_path):
    """torch is FLTest's `torch` extra: the line names fltest-deploy build --extras torch and the variant's tag."""
    assert kit_extras()["torch"] == "torch"
    without_torch = lambda name: None if name == "torch" else installed_version(name)  # noqa: E731 (the default image's)
    line = check_app(_app(tmp_path, "torch>=2.0"), "fltest:0.1.0", installed=without_torch)
    assert line.endswith(
        "project.dependencies: torch>=2.0: not in the image fltest:0.1.0, and the kit installs nothing at run "
        "time; build the image variant that has it: fltest-deploy build --extras torch, then run the federation "
        "on fltest:0.1.0-torch (FLTEST_IMAGE for fltest-flower up, fltest_image for cluster.yml)"
    )


def test_an_installed_package_in_another_version_is_named_with_the_image_s():
    numpy = installed_version("numpy")
    assert unmet_requirements(["numpy>=2.0", "numpy>=99"]) == [Unmet("numpy>=99", "numpy", numpy)]
    assert str(Unmet("numpy>=99", "numpy", numpy)) == f"numpy>=99 ({numpy} in the image)"


def test_a_requirement_for_another_platform_is_met_and_an_extra_s_requirements_are_checked():
    assert unmet_requirements(['pywin32>=300; sys_platform == "win32"']) == []
    without_ray = lambda name: None if name == "ray" else installed_version(name)  # noqa: E731
    assert [item.name for item in unmet_requirements(["flwr[simulation]>=1.25.0"], installed=without_ray)] == ["ray"]
    assert unmet_requirements(["flwr[simulation]>=1.25.0"]) == []


def test_a_requirement_that_does_not_parse_is_named():
    assert [str(item) for item in unmet_requirements(["numpy >>= 2"])] == ["numpy >>= 2 (not a valid requirement)"]


@pytest.mark.parametrize(
    "args, folder",
    [
        (["run", ".", "fltest", "--stream"], "."),
        (["run"], "."),
        (["run", "--run-config", "a=1 b=2", "my-app", "fltest"], "my-app"),
        (["run", "-c", "a=1", "--federation", "@a/b", "../app"], "../app"),
        (["run", "@flwrlabs/quickstart", "fltest"], None),
        (["ls", "fltest"], None),
        (["run", "--help"], None),
        ([], None),
    ],
)
def test_the_app_folder_of_a_flwr_command(args, folder):
    assert app_folder(args) == (Path(folder) if folder else None)


def test_the_operator_s_flwr_refuses_the_app_before_it_is_submitted(tmp_path, capsys, monkeypatch):
    """deploy.node.superlink_flwr, as in the operator's container: exit 2 and the one line, flwr never started (no SuperLink here)."""
    monkeypatch.delenv("FLTEST_IMAGE", raising=False)  # the container's image, which the line names when set
    folder = _app(tmp_path, ABSENT)
    assert run_flwr(["run", str(folder), "fltest", "--stream"], address="127.0.0.1:9", ca=str(tmp_path / "ca.crt")) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == [check_app(folder, "")]
    assert err.startswith(
        f"flwr run: {folder}/pyproject.toml: project.dependencies: {ABSENT}: not in the image of the SuperNodes,"
    )
