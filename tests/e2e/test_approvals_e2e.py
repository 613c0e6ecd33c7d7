"""The team inbox (``%chain approvals``) and the watch widget (``%chain watch``) in a real
JupyterLab and a real browser, for runs that another process drives: both drawn in the light
and the dark theme (screenshots), then Approve clicked in the inbox reaches the driver
through the store, the card goes and the watch widget shows the payment done."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chainlab.store import open_store
from tests.jupyter.test_remote_widgets import Driver

from .lab import Lab, browser_page, write_notebook
from .test_lab import (
    PANEL,
    require_chromium,
    run_all,
    shots_dir,
    themed,
)

pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

NOTEBOOK = "approvals_e2e.ipynb"
CELLS = ["%load_ext chainlab", "%chain approvals --db runs.db",
         "%chain watch pay-e2e --db runs.db"]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, Driver]]:
    require_chromium()
    work = tmp_path_factory.mktemp("approvals-lab")
    path = write_notebook(work / NOTEBOOK, list(CELLS))
    with Lab(work, [path]) as server:
        db = str(server.root / "runs.db")
        open_store(db).close()
        driver = Driver(server.root, db, "payment:pay-e2e", "mail:mail-e2e")
        try:
            driver.ready()
            store = open_store(db)
            try:  # decide only once the driver beats for its runs (else it looks gone)
                deadline = time.monotonic() + 30
                while not (store.driver_of("pay-e2e") and store.driver_of("mail-e2e")):
                    assert time.monotonic() < deadline, "the driver never beat"
                    time.sleep(0.05)
            finally:
                store.close()
            yield server, driver
        finally:
            driver.kill()


@pytest.fixture
def page(lab: tuple[Lab, Driver]) -> Iterator[Any]:
    with browser_page(shots_dir() / "approvals-e2e-failure.png", width=1200) as page:
        yield page


def test_team_inbox_and_watch_widget_in_both_themes(lab: tuple[Lab, Driver], page: Any) -> None:
    from playwright.sync_api import expect

    server, driver = lab
    run_all(page, server, NOTEBOOK)
    inbox = page.locator(f"{PANEL} .cl-team-inbox")
    expect(inbox).to_contain_text("2 decisions wait in 2 runs", timeout=30_000)
    expect(inbox.locator(".cl-card")).to_have_count(2)
    expect(inbox).to_contain_text("pay 30 EUR to ACME")
    expect(inbox).to_contain_text(f"driven by pid {driver.proc.pid}")
    watch = page.locator(f"{PANEL} .cl-run:not(.cl-team-inbox)").first
    expect(watch.locator(".cl-head")).to_contain_text(f"watching: driven by pid "
                                                      f"{driver.proc.pid}")
    expect(watch.locator("button.jupyter-button", has_text="Pause")).to_be_disabled()
    shots = shots_dir()
    page.wait_for_timeout(300)
    inbox.screenshot(path=str(shots / "approvals-light.png"))
    watch.screenshot(path=str(shots / "watch-light.png"))
    themed(page, "JupyterLab Dark")
    page.wait_for_timeout(500)  # the theme's colours settle
    inbox.screenshot(path=str(shots / "approvals-dark.png"))
    watch.screenshot(path=str(shots / "watch-dark.png"))
    themed(page, "JupyterLab Light")

    pay_card = inbox.locator(".cl-card", has_text="waits for approval")
    pay_card.locator("button.jupyter-button", has_text="Approve").click()
    expect(inbox).to_contain_text("1 decision waits in 1 run", timeout=30_000)
    expect(inbox.locator(".cl-card")).to_have_count(1)
    expect(inbox.locator(".cl-card")).to_contain_text("is in doubt")
    expect(watch.locator(".cl-head")).to_contain_text("2 succeeded", timeout=30_000)
    assert [e["entry"] for e in driver.ledger()] == ["send", "pay"]  # paid once, by the driver
    inbox.screenshot(path=str(shots / "approvals-after-approve-light.png"))
    errors = [e for e in page.errors if "favicon" not in e]
    assert not [e for e in errors if "Error displaying widget" in e], errors
    (Path(server.root) / "hold").unlink()
