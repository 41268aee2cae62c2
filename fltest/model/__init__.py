"""Numpy models: softmax regression and a ReLU MLP, trained with minibatch SGD."""

from fltest.model.numpy_mlp import evaluate, init_params, train_local

__all__ = ["evaluate", "init_params", "train_local"]
