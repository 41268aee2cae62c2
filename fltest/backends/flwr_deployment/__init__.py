"""FLTest's Flower App, and the Flower deployment: the experiment run on a SuperLink and its SuperNodes.

The App (:mod:`.app_dir`: one ServerApp, :mod:`.server_component`; one ClientApp,
:mod:`.client_component`) is what both Flower modes submit with ``flwr run``, and :mod:`.log_stream`
follows both: a deployment's SuperLink (``options: {mode: deployment, superlink: <host:port>,
root_certificates: <CA file>}``, the SuperNodes holding their own partitions,
:mod:`.node_data`) or a simulation's SuperLink of the run's own (:mod:`fltest.backends.flwr.backend`).
"""
