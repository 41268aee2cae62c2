"""Code that runs inside the FLTest image: node start-up, healthcheck, probes, the SuperLink's operator ``flwr``."""
