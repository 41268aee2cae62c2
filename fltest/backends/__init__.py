"""Backends: one module a framework, looked up by the config's ``framework`` name."""

from __future__ import annotations

from fltest.backends.base import Backend, RunJob
from fltest.config.schema import RunConfig
from fltest.errors import BackendUnavailable, InputError

NVFLARE_INSTALL = "pip install 'fltest[nvflare]'"


def _nvflare_backend() -> Backend:
    """The nvflare backend, or a one-line error saying how to install NVFlare when it is missing."""
    try:
        from fltest.backends.nvflare.backend import NVFlareBackend
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.partition(".")[0] != "nvflare":
            raise
        message = f"framework 'nvflare' needs NVFlare, which is not installed: {NVFLARE_INSTALL}"
        raise BackendUnavailable(message) from None
    return NVFlareBackend()


def get_backend(framework: str) -> Backend:
    """The backend for ``framework``; frameworks that are not available raise a one-line error."""
    if framework == "reference":
        from fltest.backends.reference import ReferenceBackend

        return ReferenceBackend()
    if framework == "flwr":
        from fltest.backends.flwr import FlwrBackend

        return FlwrBackend()
    if framework == "nvflare":
        return _nvflare_backend()
    raise BackendUnavailable(f"framework {framework!r} is not available in this version of fltest")


def backend_for(run: RunConfig) -> Backend:
    """The backend of one run: its framework and, for flwr, its ``mode`` (simulation or deployment)."""
    if run.framework == "flwr":
        mode = run.options.get("mode", "simulation")
        if mode == "deployment":
            from fltest.backends.flwr_deployment.backend import FlwrDeploymentBackend

            return FlwrDeploymentBackend()
        if mode != "simulation":
            raise InputError(f"runs.{run.name}.options.mode: {mode!r}: expected 'simulation' or 'deployment'")
    return get_backend(run.framework)


__all__ = ["Backend", "RunJob", "backend_for", "get_backend"]
