"""A Flower App's ``[project] dependencies``, checked against this environment before ``flwr run`` submits it.

The kit installs nothing at run time: its SuperLink runs with ``--disable-runtime-dependency-installation``,
and a Flower 1.42 SuperNode installs an App's dependencies only with ``--allow-runtime-dependency-installation``,
which the kit never passes. The operator's ``flwr`` (:mod:`deploy.node.superlink_flwr`) runs in the image the
SuperLink and the SuperNodes run, so a requirement this environment does not meet would fail the run on them
after it was submitted (an ImportError in the ServerApp or a ClientApp). Checked here first, it is one line
naming the package and the image variant to build (``fltest-deploy build --extras``: pyproject.toml's extras
of FLTest, which a package of any name can join).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from deploy.images import variant_tag

KIT_PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"  # FLTest's own (in the image: /opt/fltest/app/)
RUN_OPTIONS_WITH_VALUE = frozenset(
    {"--federation", "--run-config", "-c", "--federation-config", "--format"}
)  # flwr run's
NO_EXTRA = {"extra": ""}  # the marker environment of a requirement asked for without an extra

Installed = Callable[[str], "str | None"]


@dataclass(frozen=True)
class Unmet:
    """A requirement this environment does not meet: its package (``None`` for a requirement that does not parse) and
    the version installed (``None``: not installed)."""

    requirement: str
    name: str | None
    version: str | None

    def __str__(self) -> str:
        """The requirement, with the version the image has instead, or why it is no requirement."""
        if self.name is None:
            return f"{self.requirement} (not a valid requirement)"
        return self.requirement if self.version is None else f"{self.requirement} ({self.version} in the image)"


def installed_version(name: str) -> str | None:
    """The version of distribution ``name`` in this environment, ``None`` when it is not installed."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _extra_requirements(name: str, extras: set[str]) -> list[Requirement]:
    """The requirements distribution ``name`` adds for ``extras`` (``flwr[simulation]``: ray...), their markers met."""
    try:
        requires = metadata.requires(name) or []
    except metadata.PackageNotFoundError:
        return []
    found = []
    for text in requires:
        requirement = Requirement(text)
        if (
            requirement.marker is not None
            and not requirement.marker.evaluate(NO_EXTRA)
            and any(requirement.marker.evaluate({"extra": extra}) for extra in extras)
        ):
            requirement.marker = None  # asked for through the extra: needed whatever the environment's extra
            found.append(requirement)
    return found


def unmet_requirements(requirements: list[str], installed: Installed = installed_version) -> list[Unmet]:
    """Each requirement of ``requirements`` (PEP 508 strings) this environment does not meet.

    A requirement whose marker excludes this environment is met; one with extras (``flwr[simulation]``)
    needs what the distribution requires for them too.
    """
    unmet: list[Unmet] = []
    pending, seen = list(requirements), set()
    while pending:
        text = pending.pop(0)
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            unmet.append(Unmet(text, None, None))
            continue
        if str(requirement) in seen or (requirement.marker is not None and not requirement.marker.evaluate(NO_EXTRA)):
            continue
        seen.add(str(requirement))
        version = installed(requirement.name)
        if version is None or not requirement.specifier.contains(version, prereleases=True):
            unmet.append(Unmet(str(requirement), canonicalize_name(requirement.name), version))
        elif requirement.extras:
            pending += [str(extra) for extra in _extra_requirements(requirement.name, set(requirement.extras))]
    return unmet


def kit_extras(pyproject: Path = KIT_PYPROJECT) -> dict[str, str]:
    """FLTest's pyproject extras an image variant can have, by the canonical name of each package they hold."""
    with pyproject.open("rb") as file:
        optional = tomllib.load(file)["project"]["optional-dependencies"]
    return {
        canonicalize_name(Requirement(text).name): extra
        for extra, texts in optional.items()
        if extra != "dashboard"
        for text in texts
    }


def remedy(unmet: list[Unmet], image: str, extras: dict[str, str]) -> str:
    """How to build an image variant with the ``unmet`` requirements: the extras of FLTest's that have each missing
    package, else an extra of the user's own making (a package in another version than the image's, one of no extra)."""
    if all(item.version is None and item.name in extras for item in unmet):
        chosen = tuple(sorted({extras[item.name] for item in unmet}))
        variant = variant_tag(image or "<image>", chosen)
        return (
            f"build the image variant that has {'them' if len(unmet) > 1 else 'it'}: fltest-deploy build --extras "
            f"{','.join(chosen)}, then run the federation on {variant} (FLTEST_IMAGE for fltest-flower up, fltest_image "
            "for cluster.yml)"
        )
    return (
        'add what the App needs to an extra of FLTest\'s pyproject.toml (e.g. app = ["<package>==<version>"]) and build '
        "that image variant: fltest-deploy build --extras app, then run the federation on it (FLTEST_IMAGE for "
        "fltest-flower up, fltest_image for cluster.yml)"
    )


def app_folder(args: list[str]) -> Path | None:
    """The App folder a ``flwr run`` command submits (``args``: flwr's arguments); ``None`` for another command,
    for help, or for an App on the Flower platform (``@account/app``)."""
    if not args or args[0] != "run" or "--help" in args:
        return None
    positional, value_next = [], False
    for arg in args[1:]:
        if value_next:
            value_next = False
        elif arg in RUN_OPTIONS_WITH_VALUE:
            value_next = True
        elif not arg.startswith("-"):
            positional.append(arg)
    app = positional[0] if positional else "."
    return None if app.startswith("@") else Path(app).expanduser()


def check_app(
    folder: Path, image: str, installed: Installed = installed_version, pyproject: Path = KIT_PYPROJECT
) -> str | None:
    """The one line refusing the App in ``folder`` whose ``[project] dependencies`` this environment (the image
    ``image``) does not meet, naming each and the image variant to build; ``None`` when it meets them all.

    A folder with no readable ``pyproject.toml`` is left to flwr, whose own message names what is wrong.
    """
    path = (folder / "pyproject.toml").absolute()  # in the operator's container, the path on the host too
    try:
        with path.open("rb") as file:
            requirements = tomllib.load(file).get("project", {}).get("dependencies", [])
    except (OSError, tomllib.TOMLDecodeError):
        return None
    unmet = unmet_requirements([str(text) for text in requirements], installed)
    if not unmet:
        return None
    described = ", ".join(map(str, unmet))
    return (
        f"flwr run: {path}: project.dependencies: {described}: not in the image {image or 'of the SuperNodes'}, and the kit "
        f"installs nothing at run time; {remedy(unmet, image, kit_extras(pyproject))}"
    )
