"""Build the kit's images with no registry: the base image, the wheelhouse, the FLTest image.

Every build leaves only tagged images: each stage of the multi-stage Dockerfile is built
with its own target and tag (``fltest-build-deps:0.1.0`` beside ``fltest:0.1.0``), so the
stages stay as layer cache without ending as ``<none>`` images, and an image a rebuild moved
its tag away from is removed once nothing else uses it.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import http.server
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

from deploy.kit import KIT
from fltest import __version__
from fltest.errors import FLTestError, InputError

REPO = Path(__file__).resolve().parent.parent
DEFAULT_BASE_IMAGE = KIT.base_image
IMAGE = KIT.image
DOCKERFILE = "images/fltest/Dockerfile"
STAGES = ("requirements", "deps")  # the Dockerfile's stages before the final one, in build order
CONTEXT_FILES = (
    "pyproject.toml",
    "constraints.txt",
    "README.md",
    ".dockerignore",
    "images/requirements.py",
    DOCKERFILE,
)
CONTEXT_FOLDERS = ("fltest", "deploy")
FLTEST_LABEL = "org.opencontainers.image.title=fltest"  # set by the Dockerfile's final stage
LOCK = Path(tempfile.gettempdir()) / "fltest-image-build.lock"  # one build at a time on this host
# Set to 1 in the environment of a build whose caller holds LOCK around it (it would wait on itself).
LOCK_HELD = "FLTEST_IMAGE_BUILD_LOCK_HELD"
EXTRAS_WHEELHOUSE = REPO / "wheelhouse-extras"  # the extras' wheels (images/fill-wheelhouse.sh --extras)
# Where a build of an image variant reads them (served on the host's loopback during the build): a
# fixed address, as a build argument that changed would rebuild the extras' layer every time.
EXTRAS_WHEELHOUSE_PORT = 8971

Report = Callable[[str], None]


def print_stage(line: str) -> None:
    """The default progress report: one line on stderr, at once."""
    print(f"[fltest-deploy build] {line}", file=sys.stderr, flush=True)


def variant_tag(tag: str, extras: tuple[str, ...]) -> str:
    """The tag of the image variant with ``extras``: ``fltest:0.1.0`` and ``("torch",)`` -> ``fltest:0.1.0-torch``."""
    return "-".join([tag, *extras])


def check_extras(extras: tuple[str, ...]) -> tuple[str, ...]:
    """``extras`` if each is one of pyproject.toml's extras (but ``dashboard``, in every image apart), else InputError."""
    with (REPO / "pyproject.toml").open("rb") as file:
        known = [name for name in tomllib.load(file)["project"]["optional-dependencies"] if name != "dashboard"]
    unknown = [name for name in extras if name not in known]
    if unknown:
        raise InputError(f"--extras: unknown extra {', '.join(unknown)} (pyproject.toml's extras: {', '.join(known)})")
    return extras


def stage_tag(tag: str, stage: str) -> str:
    """The tag that keeps one build stage of image ``tag``: ``fltest:0.1.0`` -> ``fltest-build-deps:0.1.0``."""
    name, _, version = tag.rpartition(":") if ":" in tag.split("/")[-1] else (tag, "", "latest")
    return f"{name}-build-{stage}:{version}"


def build_tags(tag: str) -> list[str]:
    """Every tag one FLTest build sets: its stages' and then ``tag`` itself."""
    return [stage_tag(tag, stage) for stage in STAGES] + [tag]


def dangling_image_ids(client) -> set[str]:
    """The ids of the untagged images that nothing builds on (``docker images -f dangling=true``)."""
    return {image.id for image in client.images.list(filters={"dangling": True})}


def _image_id(client, tag: str) -> str | None:
    found = client.images.list(name=tag)
    return found[0].id if found else None


def _remove_if_untagged(client, image_id: str) -> None:
    """Remove an image a rebuild moved its tag away from, unless it still has a tag or a user."""
    import docker

    try:
        if not client.images.get(image_id).tags:
            client.images.remove(image_id)  # no force: an image a container or another image uses stays
    except (docker.errors.ImageNotFound, docker.errors.APIError):
        pass


@contextlib.contextmanager
def one_build_at_a_time(report: Report = print_stage) -> Iterator[None]:
    """Hold the host's build lock while an image is built, or while the untagged images are counted.

    Two builds of one tag at once would each leave the other's image untagged, and a build in
    progress shows its newest step as an untagged image (``docker images -f dangling=true``).
    A caller that holds the lock around a whole ``fltest-deploy build`` (to count the untagged
    images before and after it with no other build between) sets :data:`LOCK_HELD` for it.
    """
    if os.environ.get(LOCK_HELD) == "1":
        yield
        return
    with LOCK.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            report(f"waiting for another image build to finish ({LOCK})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _timed(report: Report, name: str, action: Callable[[], str]) -> None:
    """Run one stage, then report ``<name>: <outcome> (<seconds> s)``."""
    start = time.monotonic()
    outcome = action()
    report(f"{name}: {outcome} ({time.monotonic() - start:.1f} s)")


def build_base_image(client, tag: str = DEFAULT_BASE_IMAGE) -> str:
    """Build the debootstrap base image unless it exists (needs root for debootstrap); says which."""
    if client.images.list(name=tag):
        return "present"
    if os.geteuid() != 0:
        raise InputError(f"base image {tag} is missing: build it as root with images/base/build-base-image.sh")
    subprocess.run(["bash", str(REPO / "images" / "base" / "build-base-image.sh"), tag], check=True)
    return "built"


def fill_wheelhouse(extras: tuple[str, ...] = ()) -> str:
    """Download every wheel the image needs into ``./wheelhouse``, or with ``extras`` theirs into
    ``./wheelhouse-extras`` (pip skips the ones present); says how many."""
    folder = EXTRAS_WHEELHOUSE if extras else REPO / "wheelhouse"
    options = ["--extras", ",".join(extras)] if extras else []
    subprocess.run(["bash", str(REPO / "images" / "fill-wheelhouse.sh"), *options, str(folder)], check=True)
    return f"{len(list(folder.glob('*.whl')))} wheels"


class _QuietFolderHandler(http.server.SimpleHTTPRequestHandler):
    """Serves one folder's files and listing, logging nothing (pip reads the listing as find-links)."""

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (the base class's name)
        pass


@contextlib.contextmanager
def serving_on_loopback(folder: Path, port: int = EXTRAS_WHEELHOUSE_PORT) -> Iterator[str]:
    """Serve ``folder`` read-only on ``127.0.0.1:port`` while the block runs; yields its URL."""
    handler = functools.partial(_QuietFolderHandler, directory=str(folder))
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError as exc:
        raise FLTestError(f"cannot serve {folder} on 127.0.0.1:{port} for the build: {exc.strerror}") from exc
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/"
    finally:
        server.shutdown()
        server.server_close()


def build_args(
    pip_source: str = "wheelhouse",
    base_image: str = DEFAULT_BASE_IMAGE,
    extras: tuple[str, ...] = (),
    extras_wheelhouse: str = "",
) -> dict[str, str]:
    """The Dockerfile's build arguments: the kit's values (deploy/kit.env), the package's version, the pip source."""
    return {
        "PIP_SOURCE": pip_source,
        "BASE_IMAGE": base_image,
        "FLTEST_VERSION": __version__,
        "FLTEST_UID": str(KIT.uid),
        "FLTEST_HOME": KIT.home,
        "FLTEST_WORK_DIR": KIT.work_dir,
        "FLOWER_APP_FILES_DIR": KIT.app_files_dir,
        "EXTRAS": ",".join(extras),
        "EXTRAS_WHEELHOUSE": extras_wheelhouse,
    }


def _build_target(
    client,
    tag: str,
    target: str | None,
    pip_source: str,
    base_image: str,
    context: Path,
    extras: tuple[str, ...] = (),
    extras_wheelhouse: str = "",
) -> str:
    """One ``docker build`` to ``tag`` (up to stage ``target``), printing its steps; says built or unchanged.

    From the wheelhouse a build has no network, but the step that installs ``extras`` from
    ``extras_wheelhouse`` (a URL on the host's loopback) has the host's.
    """
    previous = _image_id(client, tag)
    network = "host" if extras_wheelhouse else "none"  # the extras step reads 127.0.0.1 of the host
    stream = client.api.build(
        path=str(context),
        dockerfile=DOCKERFILE,
        tag=tag,
        target=target,
        buildargs=build_args(pip_source, base_image, extras, extras_wheelhouse),
        network_mode=network if pip_source == "wheelhouse" else None,
        rm=True,
        forcerm=True,
        decode=True,
    )
    for chunk in stream:
        if "error" in chunk:
            raise FLTestError(f"image build failed: {chunk['error'].strip()}")
        line = chunk.get("stream", "").rstrip()
        if line.startswith("Step "):
            print(f"[build {tag}] {line}", file=sys.stderr, flush=True)
    if previous is None:
        return "built"
    if previous == _image_id(client, tag):
        return "unchanged"
    _remove_if_untagged(client, previous)
    return "rebuilt"


def build_fltest_image(
    client,
    pip_source: str = "wheelhouse",
    base_image: str = DEFAULT_BASE_IMAGE,
    tag: str = IMAGE,
    context: Path = REPO,
    report: Report = print_stage,
    extras: tuple[str, ...] = (),
):
    """Build the FLTest image stage by stage, reporting each; from the wheelhouse it builds with no network.

    With ``extras`` (pyproject extras such as ``torch``) it builds the variant ``tag-<extras>``,
    its extras installed from ``./wheelhouse-extras`` served on the host's loopback.
    """
    if pip_source not in ("wheelhouse", "pypi"):
        raise InputError(f"--pip-source: {pip_source!r}: expected wheelhouse or pypi")
    (Path(context) / "wheelhouse").mkdir(exist_ok=True)  # the Dockerfile copies it, empty for pypi
    tag = variant_tag(tag, check_extras(extras))
    serving = (
        serving_on_loopback(EXTRAS_WHEELHOUSE) if extras and pip_source == "wheelhouse" else contextlib.nullcontext("")
    )
    with one_build_at_a_time(report), serving as extras_wheelhouse:
        for target, target_tag in zip([*STAGES, None], build_tags(tag)):
            name = f"image {target_tag}" if target is None else f"image stage {target} ({target_tag})"
            wheelhouse_url = extras_wheelhouse if target is None else ""  # only the final stage installs extras
            build = functools.partial(
                _build_target, client, target_tag, target, pip_source, base_image, context, extras, wheelhouse_url
            )
            _timed(report, name, build)
        for image in client.images.list(filters={"dangling": True, "label": FLTEST_LABEL}):
            _remove_if_untagged(client, image.id)  # e.g. an earlier image a container still used when its tag moved
        return client.images.get(tag)


def build_images(
    client,
    pip_source: str = "wheelhouse",
    base_image: str | None = None,
    report: Report = print_stage,
    extras: tuple[str, ...] = (),
):
    """Everything ``fltest-deploy build`` does: the base image if it is ours and missing, the wheelhouse
    (and the extras' one), FLTest (or its variant with ``extras``).

    ``report`` receives one line a stage, such as ``wheelhouse: 91 wheels (35.2 s)``.
    """
    with one_build_at_a_time(report):
        if base_image is None:
            _timed(report, f"base image {DEFAULT_BASE_IMAGE}", lambda: build_base_image(client))
        if pip_source == "wheelhouse":
            _timed(report, "wheelhouse", fill_wheelhouse)
            if extras:
                _timed(report, f"wheelhouse of the extras {','.join(extras)}", lambda: fill_wheelhouse(extras))
    return build_fltest_image(client, pip_source, base_image or DEFAULT_BASE_IMAGE, report=report, extras=extras)


def remove_build(client, tag: str) -> None:
    """Remove ``tag`` and its stages' tags; an image that keeps another tag (or a user) stays."""
    import docker

    for name in build_tags(tag):
        try:
            client.images.remove(name)
        except (docker.errors.ImageNotFound, docker.errors.APIError):
            pass


def copy_build_context(destination: Path) -> Path:
    """A copy of what the FLTest image is built from, to change and build apart (the wheelhouse hard-linked)."""
    for name in CONTEXT_FILES:
        (destination / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, destination / name)
    for name in CONTEXT_FOLDERS:
        shutil.copytree(REPO / name, destination / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "wheelhouse", destination / "wheelhouse", copy_function=link_or_copy)
    return destination


def link_or_copy(source: str, destination: str) -> None:
    """Hard-link ``source`` to ``destination`` (a wheel costs no space twice), or copy it across file systems."""
    try:
        os.link(source, destination)
    except OSError:  # another file system
        shutil.copy2(source, destination)
