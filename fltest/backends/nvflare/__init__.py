"""The nvflare backend: FLTest's experiment as an NVIDIA FLARE 2.9 FedAvg job in the NVFlare simulator.

The backend is :class:`fltest.backends.nvflare.backend.NVFlareBackend`. This package
imports nothing itself: the simulator's server and client processes import only the
modules they run (``server``, ``client``, ``exchange``).
"""
