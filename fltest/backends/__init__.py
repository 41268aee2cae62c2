"""Backends: one module a framework, looked up by the config's ``framework`` name."""

from __future__ import annotations

from fltest.backends.base import Backend, RunJob
from fltest.errors import BackendUnavailable


def get_backend(framework: str) -> Backend:
    """The backend for ``framework``; frameworks that are not available raise a one-line error."""
    if framework == "reference":
        from fltest.backends.reference import ReferenceBackend

        return ReferenceBackend()
    if framework == "flwr":
        from fltest.backends.flwr import FlwrBackend

        return FlwrBackend()
    raise BackendUnavailable(f"framework {framework!r} is not available in this version of fltest")


__all__ = ["Backend", "RunJob", "get_backend"]
