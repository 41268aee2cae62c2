"""The pythons tier builds on the container tier's engine fixture."""

from tests.docker.conftest import docker_client  # noqa: F401  (a fixture shared with tests/docker)
