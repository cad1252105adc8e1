"""The monitor while its `api` restarts (real processes: `schemabridge api` on SQLite, stopped
with SIGTERM and started again on the same port): the page says in a sentence that the API at
its address is not answering, not the browser's "Failed to fetch", and loads itself again once
the API answers, with nothing pressed."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.e2e.browser_harness import (
    chromium,
    failed_long_vertex_run,
    opened,
    serve_demo,
    server_env,
    shoot,
)
from tests.e2e.rest_harness import Service, upgraded

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_runs_page_says_the_api_is_down_and_loads_once_it_is_back(tmp_path: Path) -> None:
    env = server_env(tmp_path, f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}")
    env["SCHEMABRIDGE_AUTH"] = "off"
    upgraded(env)
    port = _free_port()
    args = ["api", "--port", str(port), "--access-log", "off"]
    api = Service(args, env, tmp_path / "api.log")
    try:
        url = api.wait_for_url()
        with chromium() as browser, opened(browser, f"{url}/ui/#/workflows") as (page, found):
            # Chromium logs each request that found nothing listening.
            found.allowed_errors.append("ERR_CONNECTION_REFUSED")
            page.get_by_role("heading", name="Workflows").wait_for()
            assert api.stop() == 0, api.stderr()
            page.get_by_role("link", name="Runs", exact=True).click()
            down = page.locator(".api-unreachable")
            down.wait_for()
            text = down.inner_text()
            assert f"The API at {url} is not answering (it may be restarting)." in text, text
            assert "tries again by itself in 2 s" in text, text
            assert "Failed to fetch" not in page.inner_text("main")
            shoot(page, "api-unreachable")
            # Pressed while the API is still down: the page says so again, and waits on.
            page.get_by_role("button", name="Try again now").click()
            down.wait_for()
            api = Service(args, env, tmp_path / "api-again.log")
            api.wait_for_url()
            page.get_by_role("heading", name="Runs").wait_for(timeout=60_000)
            assert down.count() == 0
    finally:
        assert api.stop() == 0, api.stderr()


def test_an_action_sent_as_the_api_stops_is_not_said_refused(tmp_path: Path) -> None:
    """A tour stopped the server with a run's Retry dialog open and pressed Retry: the page
    said "✕ Retry refused: the API … is not answering", as if the API had said no. Nothing
    answered, and the retry may have been done before the connection went: the answer says
    there was no answer and that whether it was done is not known yet."""
    server = serve_demo(tmp_path, server_env(tmp_path, f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}"))
    try:
        run_id = failed_long_vertex_run(server, "ui-outage-retry", "acme")
        with chromium() as browser, opened(browser, f"{server.ui}#/runs/{run_id}") as (page, found):
            found.allowed_errors.append("ERR_CONNECTION_REFUSED")
            page.get_by_role("button", name="Retry", exact=True).click()
            dialog = page.locator("dialog[open]")
            dialog.get_by_text("run again").wait_for()
            assert server.service.stop() == 0, server.service.stderr()
            dialog.get_by_role("button", name="Retry").click()
            said = page.locator(".error-box[role=alert]", has_text="Retry")
            said.wait_for()
            text = said.inner_text()
            assert text.startswith(f"✕ Retry: no answer — the API at {server.url} is not"), text
            assert "Whether it was done is not known until the API answers again" in text, text
            assert "refused" not in text, text
            shoot(page, "action-without-answer")
    finally:
        server.service.kill()


def test_an_ended_run_s_header_says_when_the_api_stops_answering(tmp_path: Path) -> None:
    """A tour stopped the server under an ended run's page: its header went on saying "run
    ended · up to date" although its looks at the run (every 10 s) got no answer. The next
    look that gets none says so."""
    server = serve_demo(tmp_path, server_env(tmp_path, f"sqlite+aiosqlite:///{tmp_path / 'sb.db'}"))
    try:
        run_id = failed_long_vertex_run(server, "ui-outage-header", "acme")
        with chromium() as browser, opened(browser, f"{server.ui}#/runs/{run_id}") as (page, found):
            found.allowed_errors.append("ERR_CONNECTION_REFUSED")
            live = page.locator(".live")
            live.get_by_text("run ended · up to date").wait_for()
            assert server.service.stop() == 0, server.service.stderr()
            live.get_by_text("the API is not answering").wait_for(timeout=15_000)
            assert "up to date" not in live.inner_text()
            shoot(page, "ended-run-api-down")
    finally:
        server.service.kill()
