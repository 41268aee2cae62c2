"""The privacy spent by a run: ε at the config's δ after each round, from the Rényi-DP accountant of Google's
``dp-accounting``.

Each round releases one noised average: a Gaussian mechanism of noise multiplier ``z`` on the clients' sum
(its sensitivity is the clipping norm), composed over the rounds, with no amplification by sampling (the
accounting Flower's wrappers allow). Neighbouring federations differ by one client's data, added or removed.
"""

from __future__ import annotations

from dp_accounting import dp_event, rdp


def epsilon_spent(noise_multiplier: float, releases: int, delta: float) -> float | None:
    """ε at ``delta`` after ``releases`` Gaussian releases of noise multiplier ``noise_multiplier`` (``None``
    without noise: clipping alone spends no finite ε)."""
    if noise_multiplier <= 0:
        return None
    accountant = rdp.RdpAccountant()  # add or remove one: dp-accounting's default relation
    accountant.compose(dp_event.GaussianDpEvent(noise_multiplier), releases)
    return float(accountant.get_epsilon(delta))
