"""Flower deployment: FLTest's experiment as a Flower App run on a SuperLink and its SuperNodes.

Selected in a config by ``framework: flwr`` with ``options: {mode: deployment, superlink:
<host:port>, root_certificates: <CA file>}``. The SuperNodes hold their own partitions
(:mod:`fltest.backends.flwr_deployment.node_data`).
"""
