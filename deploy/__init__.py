"""FLTest's operator tooling: images, the Ray cluster (compose emulation and lab nodes), runs in the head.

Modules used inside the FLTest image (``ray_node``, ``health``, ``ray_nodes``, ``secrets``) import only the
standard library, Ray and ``fltest``; the host-side modules use the Docker SDK (``pip install '.[deploy]'``).
"""
