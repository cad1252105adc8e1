"""The run page of a fan-out whose running children workers presumed dead hold, in a real
browser against `serve --demo` on PostgreSQL + Redis: the fan-out's legend counts them among
the running ones and a line per dead worker says how many it holds and until when, in the words
of `runs watch` (`api.cli.fanout_words`); the lines go, one by one, as the progress stream
says the workers are no longer presumed dead, without a reload. The monitor said "running 38"
and nothing else while `runs show` named the dead worker.

The dead workers are real heartbeats in the server's Redis whose last beat is two minutes old
(written with a clock set back) and real claims of the children's steps in its database; a
worker "comes back" by beating again now. Each wait beats the dead ones again (as old): another
test module may flush the shared Redis database meanwhile."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio

from api.cli.fanout_words import held_children_line
from api.cli.wire import HeldChildren
from engine.coordination import keys
from engine.coordination.heartbeat import Heartbeat
from engine.runtime import Runtime
from engine.settings import Settings
from engine.store.records import ChildRow, StepAwaitingChildren
from schemas.clock import FakeClock, SystemClock
from tests.conftest import REDIS_TEST_URL, _create_pg_database, _drop_pg_database, require_service
from tests.e2e.browser_harness import (
    NARROW,
    WIDE,
    DemoServer,
    chromium,
    opened,
    serve_demo,
    server_env,
    stop,
)
from tests.integration.actions_harness import fan_out, submit

pytestmark = pytest.mark.slow

HELD = {"a": 37, "b": 1}
"""Children each dead worker holds: most first, as the API lists them."""
LEASE_S = 900.0
"""Longer than the test: only a worker coming back ends a line here."""
SILENT_S = 120.0
SCREENSHOTS = Path("/tmp")


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[DemoServer, str, dict[str, str]]]:
    """The server, the fan-out's run id and the dead workers' names (by `HELD`'s keys)."""
    require_service("PostgreSQL", "127.0.0.1", 5432)
    require_service("Redis", "127.0.0.1", 6379)
    workdir = tmp_path_factory.mktemp("dead-holder")
    name = asyncio.run(_create_pg_database())
    url = f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}"
    # Names of their own: the Redis database is shared with other tests.
    workers = {key: f"worker-{key}-{uuid.uuid4().hex[:6]}" for key in HELD}
    try:
        run_id = asyncio.run(held_fan_out(url, workers))
        free_redis()
        server = serve_demo(workdir, server_env(workdir, url, REDIS_TEST_URL))
        try:
            yield server, run_id, workers
        finally:
            server.call(f"/runs/{run_id}/cancel", {})
            stop(server)
    finally:
        asyncio.run(_drop_pg_database(name))


def free_redis() -> None:
    """Unbind the test Redis database from the database another test left it to (a process
    refuses to start on another database's Redis), leaving the rest of it alone."""
    client = redis.Redis.from_url(REDIS_TEST_URL)
    try:
        client.delete(keys.STORE_ID)
    finally:
        client.close()


async def held_fan_out(url: str, workers: dict[str, str]) -> str:
    """A fan-out whose children the `workers` hold (`HELD`), each silent `SILENT_S`, made
    before the server starts, so that its own worker claims none of them."""
    settings = Settings.model_validate({"database_url": url, "redis_url": REDIS_TEST_URL})
    free_redis()
    runtime = await Runtime.open(settings)
    try:
        total = sum(HELD.values())
        run_id = await submit(runtime, fan_out("http://127.0.0.1:9"), {"items": [{}] * total})
        (spawner,) = await runtime.store.claim(1, lease_s=60)
        child = await runtime.store.get_version("child")
        rows = [ChildRow(i, "{}", None) for i in range(total)]
        await runtime.store.create_children(spawner, child, total, rows)
        await runtime.store.complete([StepAwaitingChildren(spawner, total)])
        for key, children in HELD.items():
            await runtime.store.claim(children, LEASE_S, workers[key])
        await beat(list(workers.values()), dead=True)
        return run_id
    finally:
        await runtime.close()


async def beat(names: list[str], *, dead: bool) -> None:
    """One beat of each of `names`: as of `SILENT_S` ago (dead), or now (alive)."""
    client = redis.asyncio.Redis.from_url(REDIS_TEST_URL)
    clock = FakeClock(time.time() - SILENT_S) if dead else SystemClock()
    try:
        for name in names:
            await Heartbeat(name, client, clock, interval_s=10, ttl_s=3600).beat()
    finally:
        await client.aclose()


def beat_from_page(names: list[str], *, dead: bool) -> None:
    """`beat`, from a test driving a page: Playwright's loop runs in this thread."""
    with ThreadPoolExecutor(1) as aside:
        aside.submit(asyncio.run, beat(names, dead=dead)).result()


def until(condition: Any, dead: list[str], what: str, timeout_s: float = 30.0) -> None:
    """Wait for `condition()`, beating the `dead` workers again (as old) meanwhile."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        beat_from_page(dead, dead=True)
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"not within {timeout_s} s: {what}")


def without_silence(text: str) -> str:
    """`text` with its "no heartbeat for 2 min" read as "no heartbeat for …": the page counts
    it on each second."""
    return re.sub(r"no heartbeat for [^:]+:", "no heartbeat for …:", text)


def cli_lines(server: DemoServer, run_id: str) -> list[str]:
    """The lines `runs watch` says of the run's dead holders now."""
    dead = server.call(f"/runs/{run_id}")["fanout"]["presumedDead"]
    now = time.time()
    return [without_silence(held_children_line(HeldChildren.model_validate(d), now)) for d in dead]


FITS_JS = """(selector) => [...document.querySelectorAll(selector)].map((line) => {
  const box = line.getBoundingClientRect();
  return {right: box.right, width: document.documentElement.clientWidth,
          overflows: line.scrollWidth > line.clientWidth + 1};
})"""


def assert_fits(page: Any, width: int) -> None:
    for line in page.evaluate(FITS_JS, ".held-children-line"):
        assert line["right"] <= width and not line["overflows"], line


def assert_told_to_a_tenant_once_the_leases_ended(
    browser: Any, server: DemoServer, run_id: str, dead: list[str]
) -> None:
    """The lines as a tenant key reads them (no worker named: docs/security.md) once the
    leases have ended (the run's answer edited so: this module's leases last the test), in
    `runs watch`'s words, the command in them as code."""
    told: list[dict[str, Any]] = []
    # One moment for every edit: the page and its stream get the answer edited at different
    # times, and a lease's end read a second apart said "08:32:10" against "08:32:09".
    ended_at = time.time() - 10

    def edited() -> dict[str, Any]:
        answer = server.call(f"/runs/{run_id}")
        for held in answer["fanout"]["presumedDead"]:
            held["holder"]["worker"] = None
            held["leaseExpiresAt"] = ended_at
        told[:] = answer["fanout"]["presumedDead"]
        return dict(answer)

    def as_told(route: Any) -> None:
        route.fulfill(json=edited())

    def streamed(route: Any) -> None:
        # One progress event, edited alike; the stream then closes and the page reopens it.
        answer = edited()
        keep = ("vertexId", "status", "children", "waiting")
        steps = [{k: step.get(k) for k in keep} for step in answer["steps"]]
        progress = {**answer, "ended": False, "steps": steps}
        body = f"retry: 3000\nevent: progress\ndata: {json.dumps(progress)}\n\n"
        route.fulfill(status=200, content_type="text/event-stream", body=body)

    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        page.route(f"**/runs/{run_id}", as_told)
        page.route(f"**/runs/{run_id}/events", streamed)
        page.reload()
        lines = page.locator(".fanout-section .held-children-line")
        until(lambda: lines.count() == 2 and "a worker" in lines.first.inner_text(), dead, "told")
        now = time.time()
        cli = [held_children_line(HeldChildren.model_validate(held), now) for held in told]
        said = [t.removeprefix("⚠ ") for t in lines.all_inner_texts()]
        assert [without_silence(t) for t in said] == [
            without_silence(line.replace("`", "")) for line in cli
        ], said
        assert said[0].startswith("37 running children held by a worker (no heartbeat for ")
        assert "their leases ended by" in said[0] and "its lease ended at" in said[1], said
        assert lines.first.locator("code").inner_text() == "schemabridge services"
        page.set_viewport_size(NARROW)  # the longest lines, on a phone
        page.wait_for_timeout(300)
        assert_fits(page, NARROW["width"])
        shot = SCREENSHOTS / f"ui-fanout-dead-holder-ended-{NARROW['width']}.png"
        page.locator(".fanout-section").screenshot(path=str(shot))


@pytest.fixture(scope="module")
def browser(stack: tuple[DemoServer, str, dict[str, str]]) -> Iterator[Any]:
    with chromium() as found:
        yield found


def test_the_fan_out_says_which_children_dead_workers_hold_until_they_come_back(
    stack: tuple[DemoServer, str, dict[str, str]], browser: Any
) -> None:
    server, run_id, workers = stack
    dead = list(workers.values())
    with opened(browser, f"{server.ui}#/runs/{run_id}") as (page, _):
        section = page.locator(".fanout-section")
        lines = section.locator(".held-children-line")
        until(lambda: lines.count() == 2, dead, "a line per dead worker")
        legend = section.locator(".legend").inner_text()
        assert "running 38 (38 of them held by a worker presumed dead)" in legend, legend
        said = [without_silence(t.removeprefix("⚠ ")) for t in lines.all_inner_texts()]
        assert said == cli_lines(server, run_id), said
        assert said[0].startswith(f"37 running children held by worker {workers['a']} (")
        assert "taken back when their leases end, by" in said[0], said[0]
        assert said[1].startswith(f"1 running child held by worker {workers['b']} (")
        assert "taken back when its lease ends at" in said[1], said[1]
        # A warning's tone, as a dead step holder's line: not an error's red.
        assert "holder-presumed_dead" in (lines.first.get_attribute("class") or "")
        for size in (WIDE, NARROW):
            page.set_viewport_size(size)
            page.wait_for_timeout(300)  # the page draws its sections anew for the width
            assert_fits(page, size["width"])
            shot = SCREENSHOTS / f"ui-fanout-dead-holder-{size['width']}.png"
            section.screenshot(path=str(shot))
        page.set_viewport_size(WIDE)
        assert_told_to_a_tenant_once_the_leases_ended(browser, server, run_id, dead)

        # Only the stream may tell the page: no read of the run's detail from here on.
        reads: list[str] = []
        page.on("request", lambda r: reads.append(r.url) if r.url.endswith(run_id) else None)
        beat_from_page([workers["a"]], dead=False)  # worker a comes back
        until(lambda: lines.count() == 1, [workers["b"]], "worker a's line gone", 60)
        assert workers["b"] in lines.first.inner_text()
        legend = section.locator(".legend").inner_text()
        assert "running 38 (1 of them held by a worker presumed dead)" in legend, legend
        beat_from_page([workers["b"]], dead=False)
        until(lambda: section.locator(".held-children").count() == 0, [], "the lines gone", 60)
        assert "presumed dead" not in section.inner_text()
        assert reads == [], reads
