"""The model a malicious client sends (:mod:`fltest.config.attacks` says what each attack does)."""

from __future__ import annotations

import numpy as np

from fltest.config.attacks import AttackConfig, GaussianAttack, SignFlipAttack
from fltest.params import Params, shaped_like


def attacked(
    attack: AttackConfig, seed: int, server_round: int, partition_id: int, sent: Params, honest: Params
) -> Params:
    """What client ``partition_id`` sends in ``server_round`` under ``attack``, from the round's global model ``sent``
    and its honest model ``honest``."""
    if isinstance(attack, GaussianAttack):
        rng = np.random.default_rng([seed, 5, server_round, partition_id])
        tampered = [w + rng.normal(0.0, attack.std, np.shape(w)) for w in sent]
    else:
        factor = -attack.factor if isinstance(attack, SignFlipAttack) else attack.factor
        tampered = [w + factor * (h - w) for w, h in zip(sent, honest, strict=True)]
    return shaped_like(tampered, sent)
