"""Secrets the host makes for the kit: the Ray token, the Flower CA and TLS certificate, SuperNode key pairs."""
