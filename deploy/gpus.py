"""GPUs of the kit's containers: how many a node (or SuperNode) is given, and whether Docker passes real devices.

One value per node sets both what Ray offers (``--num-gpus``) and, unless ``FLTEST_GPU_DEVICES=none``,
an NVIDIA device request of that count on the node's container (compose's
``deploy.resources.reservations.devices``, ``docker run --gpus count=N`` for the Ansible roles).
With ``FLTEST_GPU_DEVICES=none`` the GPUs are Ray's logical ones only: the wiring (Ray's counts,
a Flower client's share, the status) can be tried on a machine without GPUs, as the tests do.

docker-compose 1.29 takes a device request's ``count`` only as an integer or ``"all"``: an
interpolated ``${...}`` is a string and is refused, so the requests are written into a generated
compose file with literal counts (:func:`device_override`).
"""

from __future__ import annotations

from collections.abc import Mapping

from fltest.errors import InputError

DEVICES_VARIABLE = "FLTEST_GPU_DEVICES"
NVIDIA = "nvidia"  # the default: Docker's NVIDIA device requests (the NVIDIA Container Toolkit on the host)
LOGICAL = "none"  # Ray's logical GPUs only, no device reaches a container
DEVICE_MODES = (NVIDIA, LOGICAL)


def device_mode(value: str | None) -> str:
    """The value of ``FLTEST_GPU_DEVICES``: ``nvidia`` (unset or empty) or ``none``; anything else is bad input."""
    mode = (value or NVIDIA).strip()
    if mode not in DEVICE_MODES:
        raise InputError(
            f"{DEVICES_VARIABLE}={value}: expected {LOGICAL} (Ray's logical GPUs only, no device) "
            f"or {NVIDIA} (the default: NVIDIA device requests)"
        )
    return mode


def gpu_count(value: str | None, where: str) -> int:
    """A GPU count setting (empty: 0) as an integer; ``where`` names the setting in the one-line error."""
    text = (value or "0").strip()
    if not text.isdigit():
        raise InputError(f"{where}={value}: expected a GPU count (0 or more)")
    return int(text)


def device_request(count: int) -> dict:
    """Compose's NVIDIA device request for ``count`` GPUs (``deploy.resources.reservations.devices``, compose 1.28+)."""
    return {"driver": NVIDIA, "count": count, "capabilities": ["gpu"]}


def device_override(counts: Mapping[str, int], mode: str) -> dict | None:
    """A compose override giving each service of ``counts`` its device request; ``None`` when none is needed.

    No request for a service with 0 GPUs, and none at all in :data:`LOGICAL` mode.
    """
    services = {
        name: {"deploy": {"resources": {"reservations": {"devices": [device_request(count)]}}}}
        for name, count in counts.items()
        if count > 0
    }
    if mode == LOGICAL or not services:
        return None
    return {"services": services}
