"""Which containers ``fltest-deploy logs [node]`` shows for the names an operator types."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from deploy.ray_emulation.node_logs import select_nodes
from fltest.errors import InputError


@dataclass
class Named:
    """The two attributes of a container that ``select_nodes`` reads."""

    name: str
    labels: dict = field(default_factory=dict)


def _project(separator: str) -> list[Named]:
    """A head and two workers named as docker-compose 1.29 (``_``) or compose v2 (``-``) names them."""
    return [
        Named(f"fltest{separator}{service}{separator}{index}", {"com.docker.compose.service": service})
        for service, index in (("ray-head", 1), ("ray-worker", 1), ("ray-worker", 2))
    ]


@pytest.mark.parametrize("separator", ["_", "-"])
@pytest.mark.parametrize("typed", ["ray-worker-2", "ray-worker_2", "worker-2"])
def test_a_worker_is_found_whichever_separator_the_operator_types(separator, typed):
    (chosen,) = select_nodes(_project(separator), typed)
    assert chosen.name == f"fltest{separator}ray-worker{separator}2"


def test_a_service_names_all_its_containers_and_none_names_every_node():
    containers = _project("_")
    assert [c.name for c in select_nodes(containers, "ray-worker")] == ["fltest_ray-worker_1", "fltest_ray-worker_2"]
    assert select_nodes(containers, None) == containers


def test_an_unknown_node_is_one_line_listing_the_containers():
    with pytest.raises(InputError) as failure:
        select_nodes(_project("_"), "ray-worker-3")
    assert str(failure.value) == (
        "node ray-worker-3: no such container in the project "
        "(containers: fltest_ray-head_1, fltest_ray-worker_1, fltest_ray-worker_2)"
    )
