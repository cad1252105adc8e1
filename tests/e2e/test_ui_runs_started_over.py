"""The runs list in a real browser, against `schemabridge serve --demo` (embedded store): a
FAILED run an operator already started over shows it beside its status, with a link to the
run its start over made, and "Select failed on this page" leaves it out (a batch retry would
skip it: 409 `started_over`). Every page fails its test on a JavaScript or console error, or
on a request off loopback."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.browser_harness import (
    FIT_JS,
    NARROW,
    WIDE,
    DemoServer,
    assert_fits_a_phone,
    demo_on_sqlite,
    failed_long_vertex_run,
    opened,
    shoot,
)

pytestmark = pytest.mark.slow

CHECKED_JS = """() => [...document.querySelectorAll('tr[data-run]')]
  .filter((row) => row.querySelector('input[type=checkbox]').checked)
  .map((row) => row.dataset.run)"""
"""The ids of the runs list's rows whose box is ticked."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoServer]:
    with demo_on_sqlite(tmp_path_factory, "ui-runs-started-over") as running:
        yield running


def test_a_failure_started_over_links_its_new_run_and_is_not_selected(
    server: DemoServer, browser: Any
) -> None:
    """The tour: two FAILED runs looked alike though one was started over already; "Select
    failed" picked both, and the batch retry then skipped that one."""
    tenant = "started-over-list"
    old = failed_long_vertex_run(server, "ui-started-over", tenant)
    other = failed_long_vertex_run(server, "ui-started-over", tenant)
    new = server.call(f"/runs/{old}/start-over", {})["newRunId"]
    server.wait_status(new, {"SUCCEEDED", "FAILED"})
    with opened(browser, f"{server.ui}#/runs?tenant={tenant}&status=FAILED") as (page, _):
        link = page.locator(f"tr[data-run='{old}'] td.status-cell a.started-over")
        link.wait_for()
        assert link.inner_text() == f"↻ started over as {new[:8]}"
        assert link.get_attribute("href") == f"#/runs/{new}"
        title = f"Started over as run {new}: look at that run; this one is not retried"
        assert link.get_attribute("title") == title
        badge = page.locator(f"tr[data-run='{old}'] td.status-cell .badge")
        assert badge.inner_text().split() == ["✕", "failed"]
        assert page.locator(f"tr[data-run='{other}'] .started-over").count() == 0

        page.get_by_role("button", name="Select failed on this page").click()
        assert page.evaluate(CHECKED_JS) == [other]
        assert page.get_by_role("button", name="Retry selected (1)").is_enabled()
        shoot(page, "runs-started-over")
        page.set_viewport_size(NARROW)
        assert_fits_a_phone(page.evaluate(FIT_JS, ["table.runs", "tbody td"]))
        page.set_viewport_size(WIDE)

        # "Retry all matching" names the run it skips and the run it was started over as.
        page.get_by_role("button", name="Retry all matching…").click()
        dialog = page.locator("dialog.modal")
        dialog.wait_for()
        said = " ".join(dialog.inner_text().split())
        assert (
            "1 matched is skipped: started over (its retry would send its calls a second time, "
            f"beside the new run's; look at that one): {old[:8]} (started over as {new[:8]})."
        ) in said, said
        skipped = dialog.locator(".warning-box a")
        assert [skipped.nth(i).get_attribute("href") for i in range(2)] == [
            f"#/runs/{old}",
            f"#/runs/{new}",
        ]
        shoot(page, "runs-started-over-retry-all")
        dialog.get_by_role("button", name="Cancel").click()
        dialog.wait_for(state="detached")

        link.click()
        page.wait_for_url(f"**#/runs/{new}")
        page.get_by_text(new, exact=True).first.wait_for()
