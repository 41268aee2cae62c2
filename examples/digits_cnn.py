"""A small PyTorch CNN for image-shaped features (FLTest's model contract, through TorchClassifier).

Named by examples/digits_cnn.yaml (``model: {module: digits_cnn}``); it needs the ``torch`` extra.
The network takes any image size with sides divisible by 4: digits' 8x8x1, or CIFAR's 32x32x3.
"""

from __future__ import annotations

from torch import nn

from fltest.model.torch_classifier import TorchClassifier


def network(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Two 3x3 convolutions with ReLU and 2x2 max-pooling, then a linear classifier."""
    channels, height, width = input_shape
    return nn.Sequential(
        nn.Conv2d(channels, 16, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * (height // 4) * (width // 4), num_classes),
    )


init_params, train, evaluate = TorchClassifier(network).contract()
