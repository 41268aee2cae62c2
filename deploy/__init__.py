"""FLTest's operator tooling, one folder for each place its code runs.

- ``node/``: inside the FLTest image (standard library, Ray and ``fltest`` only): a Ray
  node's start-up, its healthcheck, the live-node probe, the dashboard forwarder, the
  operator's ``flwr`` in the SuperLink's container and the Fleet proxy's nginx config.
- ``pki/``: secrets made on the host: the Ray token, the Flower CA and TLS certificate,
  the SuperNodes' key pairs.
- ``ray_emulation/``: the Ray cluster emulation on the host (its compose project,
  readiness, runs in the head, node logs).
- ``flower_emulation/``: the Flower deployment emulation on the host (SuperLink,
  generated SuperNodes, registration, runs in the SuperLink's namespace).
- ``commands/``: one entry module per command (``fltest-deploy``, ``fltest-flower``).
- ``compose.py`` (the one compose wrapper both emulations use), ``engine.py`` (the Docker
  engine), ``images.py`` (the registry-free image build).

The host-side modules use the Docker SDK (``pip install '.[deploy]'``).
"""
