"""Example client hooks for examples/digits.yaml (see fltest.hooks for the contract)."""

import numpy as np
from sklearn.metrics import f1_score


def after_local_training(partition_id, server_round, old_params, new_params):
    """Report how far local training moved the model (L2 norm of the update)."""
    return {"update_norm": float(np.sqrt(sum(np.sum((n - o) ** 2) for o, n in zip(old_params, new_params))))}


def evaluate_metrics(labels, probabilities):
    """Macro-averaged F1 of the global model on the test split."""
    return {"macro_f1": float(f1_score(labels, probabilities.argmax(axis=1), average="macro"))}
