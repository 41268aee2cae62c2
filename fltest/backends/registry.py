"""The backends' registry: one module a framework, found by the kind of run (``fltest.config.runs``)."""

from __future__ import annotations

from collections.abc import Callable

from fltest.backends.base import Backend, RunJob
from fltest.config.runs import RunConfig, run_kind
from fltest.errors import BackendUnavailable

NVFLARE_INSTALL = "pip install -c constraints.txt -e '.[nvflare]' in FLTest's folder"  # FLTest is not on PyPI


def _reference() -> Backend:
    from fltest.backends.reference import ReferenceBackend

    return ReferenceBackend()


def _flwr_simulation() -> Backend:
    from fltest.backends.flwr.backend import FlwrBackend

    return FlwrBackend()


def _flwr_deployment() -> Backend:
    from fltest.backends.flwr_deployment.backend import FlwrDeploymentBackend

    return FlwrDeploymentBackend()


def _nvflare() -> Backend:
    """The nvflare backend, or a one-line error saying how to install NVFlare when it is missing."""
    try:
        from fltest.backends.nvflare.backend import NVFlareBackend
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.partition(".")[0] != "nvflare":
            raise
        message = f"framework 'nvflare' needs NVFlare, which is not installed: {NVFLARE_INSTALL}"
        raise BackendUnavailable(message) from None
    return NVFlareBackend()


# The kind of run (its framework, and for flwr its mode) -> its backend, imported only when asked for.
BACKENDS: dict[str, Callable[[], Backend]] = {
    "reference": _reference,
    "flwr-simulation": _flwr_simulation,
    "flwr-deployment": _flwr_deployment,
    "nvflare": _nvflare,
}


def backend_for(run: RunConfig) -> Backend:
    """The backend of one run; a framework that is not installed raises a one-line error."""
    return BACKENDS[run_kind(run)]()


__all__ = ["BACKENDS", "Backend", "RunJob", "backend_for"]
