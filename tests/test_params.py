"""Parameters keep their order, values and float64 dtype wherever FLTest stores or ships them."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

from fltest.backends.flwr.client_app import params_to_record, record_to_params
from fltest.backends.flwr_deployment import channel
from fltest.backends.supervision import Round
from fltest.params import keyed, load_params, params_from_bytes, params_to_bytes, save_params, unkeyed
from fltest.rounds import RoundPrivacy, RoundResult


def _params(count: int = 12) -> list[np.ndarray]:
    """More than ten arrays (``p10`` sorts before ``p2`` as text), of different shapes and values."""
    rng = np.random.default_rng(0)
    return [rng.standard_normal((i % 3 + 1, i + 1)) for i in range(count)]


def _same(left: list[np.ndarray], right: list[np.ndarray]) -> bool:
    return len(left) == len(right) and all(
        a.dtype == np.float64 and a.shape == b.shape and np.array_equal(a, b) for a, b in zip(left, right)
    )


def test_every_form_gives_back_the_same_arrays_in_order(tmp_path):
    params = _params()
    save_params(tmp_path / "model.npz", params)
    with np.load(tmp_path / "model.npz") as archive:
        assert archive.files == [f"p{i}" for i in range(12)]
    assert _same(load_params(tmp_path / "model.npz"), params)
    assert _same(params_from_bytes(params_to_bytes(params)), params)
    assert _same(unkeyed(dict(reversed(keyed(params).items()))), params)
    assert _same(record_to_params(params_to_record(params)), params)


def test_float32_parameters_are_stored_as_float64_exactly():
    params = [np.linspace(0, 1, 7, dtype=np.float32)]
    (stored,) = params_from_bytes(params_to_bytes(params))
    assert stored.dtype == np.float64 and np.array_equal(stored, params[0].astype(np.float64))


@pytest.mark.parametrize("privacy", [None, RoundPrivacy(0.1, 0.0124, 0.0125, 3.25, 1e-5)])
def test_the_deployment_channel_carries_a_round_bit_for_bit(privacy):
    report = RoundResult(3, _params(), {"train_loss": 0.25}, [0, 2], privacy=privacy)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        channel.LogSink().round_done(report)
    parsed = channel.parse_line("INFO :      " + printed.getvalue())  # as flwr log prefixes it
    assert isinstance(parsed, Round)
    result = parsed.result
    assert (result.server_round, result.train_metrics, result.clients) == (3, {"train_loss": 0.25}, [0, 2])
    assert _same(result.params, report.params)
    assert result.privacy == privacy
