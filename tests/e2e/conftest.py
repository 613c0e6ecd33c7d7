"""Browser tests: Playwright's assertions wait up to 15 s instead of 5. A widget round trip
(a keystroke -> the kernel validates -> the problems list redraws) took over 5 s on this
2-core machine under a parallel test run (test_design_and_run_a_two_step_chain failed so once
and passed alone); a wait that is long enough changes nothing when the page is right and still
fails when it is wrong."""

from __future__ import annotations

import pytest

try:
    from playwright.sync_api import expect
except ImportError:  # the browser tests skip themselves without Playwright
    expect = None


@pytest.fixture(autouse=True, scope="session")
def _patient_expect() -> None:
    if expect is not None:
        expect.set_options(timeout=15_000)
