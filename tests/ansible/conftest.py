"""The Ansible tier builds on the container tier's fixtures: the engine and the FLTest image, built offline."""

from tests.docker.conftest import docker_client, fltest_image  # noqa: F401  (fixtures shared with tests/docker)
