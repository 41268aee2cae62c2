"""Numpy models: softmax regression and a ReLU MLP, trained with minibatch SGD."""

from fltest.model.numpy_mlp import Params, evaluate, init_params, train_local

__all__ = ["Params", "evaluate", "init_params", "train_local"]
