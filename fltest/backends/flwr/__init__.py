"""The flwr backend: FLTest's experiment as a Flower 1.42 simulation, through ``flwr run`` on a simulation SuperLink
of the run's own (:mod:`fltest.backends.flwr.backend`), its clients on Ray.

This package imports nothing itself: its ClientApp (:mod:`fltest.backends.flwr.client_app`) is also
the deployment's, started once per message on a SuperNode, which must not pay for Ray.
"""
