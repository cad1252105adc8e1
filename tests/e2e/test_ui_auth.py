"""The monitor with authentication on (`schemabridge serve`, no --demo): the page loads, the API
answers 401, the page asks for a key, keeps it in the tab's sessionStorage and sends it."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.browser_harness import chromium, opened, server_env, shoot
from tests.e2e.rest_harness import SCHEMABRIDGE, Service

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    workdir = tmp_path_factory.mktemp("auth")
    env = server_env(workdir, f"sqlite+aiosqlite:///{workdir / 'sb.db'}")
    subprocess.run([SCHEMABRIDGE, "db", "upgrade"], env=env, check=True, capture_output=True)
    created = subprocess.run(
        [SCHEMABRIDGE, "keys", "create", "--admin", "--name", "ui"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    key = created.stdout.strip().splitlines()[-1]
    service = Service(["serve", "--port", "0", "--no-access-log"], env, workdir / "serve.log")
    try:
        yield service.wait_for_url(), key
    finally:
        assert service.stop() == 0


@pytest.fixture(scope="module")
def browser(secured: tuple[str, str]) -> Iterator[Any]:
    with chromium() as found:
        yield found


def test_the_page_asks_for_a_key_and_keeps_it_in_the_tab(
    secured: tuple[str, str], browser: Any
) -> None:
    url, key = secured
    with opened(browser, f"{url}/ui/#/runs") as (page, watch):
        # The refused requests are the point here; Chromium logs each 401 as an error.
        watch.allowed_errors.append("status of 401")
        dialog = page.locator("dialog.modal")
        dialog.get_by_role("heading", name="API key needed").wait_for()
        shoot(page, "api-key-dialog", narrow=False)
        page.fill("#api-key", "sbk_wrong")
        dialog.get_by_role("button", name="Use this key").click()
        dialog.get_by_role("heading", name="API key needed").wait_for()  # asked again
        page.fill("#api-key", key)
        dialog.get_by_role("button", name="Use this key").click()
        page.get_by_role("heading", name="Runs").wait_for()
        page.locator("td.empty", has_text="No runs match").wait_for()
        assert page.evaluate("sessionStorage.getItem('schemabridge.apiKey')") == key
        assert page.evaluate("localStorage.length") == 0
        page.get_by_role("link", name="Services").click()
        page.locator("tbody tr td.mono").first.wait_for()  # no second prompt: the key is kept
        assert page.locator("dialog.modal").count() == 0


def test_the_api_reference_renders_with_no_way_out(secured: tuple[str, str], browser: Any) -> None:
    """`/docs` is Swagger UI with its scripts served by the API: `opened` fails any request
    that would leave loopback, and the page still lists the routes."""
    url, _ = secured
    with opened(browser, f"{url}/docs") as (page, _):
        page.locator(".opblock-summary-path", has_text="/workflows/{name}/runs").first.wait_for()
        shoot(page, "api-reference", narrow=False)
