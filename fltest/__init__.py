"""FLTest: run one federated-learning experiment on several FL frameworks and compare them."""

__version__ = "0.1.0"
