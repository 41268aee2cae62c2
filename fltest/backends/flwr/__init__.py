"""The flwr backend: FLTest's experiment as a Flower 1.42 simulation on Ray."""

from fltest.backends.flwr.backend import FlwrBackend

__all__ = ["FlwrBackend"]
