"""Which device a client trains on: the name of the variable by which the kit tells a client process it was given a GPU.

Torch-free, so that the kit's container definitions (the Flower emulation's SuperNodes, the Ansible
roles, which a test checks against it) and :mod:`fltest.model.torch_classifier` share one name.
"""

from __future__ import annotations

import os

#: Set to :data:`GPU` in the environment of a Flower SuperNode given a GPU; its ClientApp processes inherit it.
CLIENT_DEVICE_VARIABLE = "FLTEST_CLIENT_DEVICE"
GPU = "cuda"


def gpu_given() -> bool:
    """Whether this process's container was given a GPU to train on (:data:`CLIENT_DEVICE_VARIABLE` is :data:`GPU`)."""
    return os.environ.get(CLIENT_DEVICE_VARIABLE) == GPU
