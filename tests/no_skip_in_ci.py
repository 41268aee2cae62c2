"""A pytest plugin: where the ``CI`` environment variable is set, a skipped test is a failure.

Every tier (fast, ray, nvflare, docker, ansible) must run in CI, so a missing Docker engine,
compose tool or package there fails with one line saying what is missing, instead of leaving
CI green with the tier skipped. Outside CI a skip stays a skip (the reason is printed by ``-ra``).
"""

from __future__ import annotations

import os

import pytest

CI_VARIABLE = "CI"


def in_ci() -> bool:
    """Whether the ``CI`` variable is set to something other than empty, 0, false or no."""
    return os.environ.get(CI_VARIABLE, "").strip().lower() not in ("", "0", "false", "no")


def skip_reason(report: pytest.TestReport) -> str:
    """The reason a skipped report gives."""
    return report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Turn a skip into a failure in CI, naming what was missing."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and in_ci():
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where every tier must run: {skip_reason(report).removeprefix('Skipped: ')}"
