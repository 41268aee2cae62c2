"""The Docker engine the host-side tooling talks to (Docker SDK)."""

from __future__ import annotations

from fltest.errors import FLTestError


def docker_client():
    """A Docker SDK client, or a one-line error when no engine answers."""
    import docker

    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:  # the SDK raises several types for "no engine"
        raise FLTestError(f"no Docker engine answers: {exc}") from None
    return client
