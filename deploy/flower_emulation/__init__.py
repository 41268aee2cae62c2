"""The Flower deployment emulation on one host: SuperLink, SuperNodes, registration, runs beside the SuperLink."""
