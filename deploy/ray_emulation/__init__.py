"""The Ray cluster emulation on one host: its compose project, readiness, runs in the head, node logs."""
