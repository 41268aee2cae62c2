"""In CI a skipped test fails with one line saying what was missing; elsewhere it stays a skip."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

SKIPPING = """
import pytest

@pytest.fixture
def engine():
    pytest.skip("no Docker engine answers: connection refused")

def test_needs_the_engine(engine):
    pass

def test_needs_a_package():
    pytest.importorskip("a_package_that_is_not_installed")
"""


@pytest.mark.parametrize("ci, failed", [("true", 2), ("", 0), ("0", 0)])
def test_a_skip_fails_only_in_ci(pytester, monkeypatch, ci, failed):
    monkeypatch.setenv("CI", ci)
    pytester.makepyfile(SKIPPING)
    result = pytester.runpytest("-p", "tests.no_skip_in_ci", "-ra")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) + outcomes.get("errors", outcomes.get("error", 0)) == failed, result.stdout.str()
    assert outcomes.get("skipped", 0) == 2 - failed, result.stdout.str()
    if failed:
        result.stdout.fnmatch_lines(
            [
                "*skipped in CI, where every tier must run: no Docker engine answers: connection refused*",
                "*skipped in CI, where every tier must run: could not import 'a_package_that_is_not_installed'*",
            ]
        )
