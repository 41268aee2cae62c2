"""Models: the contract every model meets, FLTest's built-in numpy MLP, and loading the one a config names."""

from fltest.model.contract import Evaluation, LocalResult, Model
from fltest.model.load import initial_params, load_model

__all__ = ["Evaluation", "LocalResult", "Model", "initial_params", "load_model"]
