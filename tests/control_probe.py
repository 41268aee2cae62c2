"""Probes of the SuperLink's ports as another user or host would send them: Control must be refused.

Shared by the compose emulation's test (tests/docker) and the lab's (tests/ansible). ``PROBE`` is a
Python program (run as ``python -c PROBE <json>``, on the host, as another user, or in a container)
that sends each (host, port, method, path) over TLS without checking the certificate and prints the
HTTP status and whether nginx's own page answered, or the error's name.
"""

from __future__ import annotations

from deploy.flower_emulation.federation import FLEET_PORT
from deploy.node.superlink_flwr import SUPERLINK_PORT

PROBE = r"""
import http.client, json, ssl, sys
context = ssl.create_default_context()
context.check_hostname, context.verify_mode = False, ssl.CERT_NONE   # a user who skips the check
answers = {}
for host, port, method, path in json.loads(sys.argv[1]):
    try:
        connection = http.client.HTTPSConnection(host, port, context=context, timeout=5)
        connection.request(method, path, body=b"" if method == "POST" else None, headers={"Content-Type": "application/protobuf"})
        response = connection.getresponse()
        answers[f"{method} {host}:{port}{path}"] = [response.status, b"<center>nginx</center>" in response.read()]
    except OSError as exc:
        answers[f"{method} {host}:{port}{path}"] = type(exc).__name__
print(json.dumps(answers))
"""
CONTROL_PATHS = [
    "/v1/control/list-nodes",
    "/v1/control/unregister-node",
    "/v1/fleet/../control/list-nodes",
    "/v1/fleet/%2e%2e/control/list-nodes",
    "/v1/control/../fleet/get-run",
    "/v1/runtime/get-nodes",
]


def probes(hosts: list[str]) -> tuple[list, list, list]:
    """The Control probes (every path, both ports), the /health probes and a Fleet probe, for ``hosts``."""
    control = [
        (h, port, "POST", path) for h in hosts for port in (FLEET_PORT, SUPERLINK_PORT) for path in CONTROL_PATHS
    ]
    return (
        control,
        [(h, FLEET_PORT, "GET", "/health") for h in hosts],
        [(h, FLEET_PORT, "POST", "/v1/fleet/get-run") for h in hosts],
    )


def refused(answer) -> bool:
    """The proxy's own 403, or no listener at all."""
    return answer == [403, True] or answer == "ConnectionRefusedError"


def check_refusals(answers: dict, control: list, health: list, fleet: list) -> None:
    """Every Control probe refused; /health 200 from the SuperLink; a Fleet call answered by the SuperLink, not nginx."""
    key = lambda probe: f"{probe[2]} {probe[0]}:{probe[1]}{probe[3]}"  # noqa: E731
    assert {key(p): answers[key(p)] for p in control if not refused(answers[key(p)])} == {}
    assert all(answers[key(p)] == [200, False] for p in health), answers
    assert all(isinstance(answers[key(p)], list) and answers[key(p)][1] is False for p in fleet), (
        answers
    )  # the SuperLink answered
