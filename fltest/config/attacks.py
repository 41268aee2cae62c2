"""Malicious clients (``attack``): chosen clients tamper with the model they send, the same way on every backend.

An attacked client trains as the others do, its hooks see its honest model, and then it sends, instead of
``w_t + Δ`` (``w_t`` the round's global model, ``Δ`` its honest change):

- ``sign_flip``: ``w_t - factor·Δ``, its change reversed (factor 1 by default);
- ``scaled``: ``w_t + factor·Δ``, its change magnified (factor 10 by default);
- ``gaussian``: ``w_t + N(0, std²)`` on every coordinate, a random model near the global one (std 1 by default),
  drawn from the experiment's seed, the round and the client.

:func:`fltest.attacks.attacked` applies it in every backend's client.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

CLIENTS = "The partition ids of the malicious clients (each once)."


class _Attack(BaseModel):
    """What every attack has: its clients. Unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    clients: list[Annotated[int, Field(strict=True, ge=0)]] = Field(min_length=1, description=CLIENTS)


class SignFlipAttack(_Attack):
    """The client sends ``w_t - factor·Δ``."""

    kind: Literal["sign_flip"] = Field(description="The attack, by name.")
    factor: Annotated[float, Field(gt=0)] = Field(1.0, description="How far the reversed change goes.")


class ScaledAttack(_Attack):
    """The client sends ``w_t + factor·Δ``."""

    kind: Literal["scaled"] = Field(description="The attack, by name.")
    factor: Annotated[float, Field(gt=0)] = Field(10.0, description="The magnification of the client's change.")


class GaussianAttack(_Attack):
    """The client sends ``w_t + N(0, std²)``."""

    kind: Literal["gaussian"] = Field(description="The attack, by name.")
    std: Annotated[float, Field(gt=0)] = Field(1.0, description="The standard deviation of the noise.")


AttackConfig = Annotated[SignFlipAttack | ScaledAttack | GaussianAttack, Field(discriminator="kind")]
