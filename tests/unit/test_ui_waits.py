"""The web monitor's words for waits (ui/static/js/waits.js), run in Node: they say what the
CLI says (schemas/waiting.py, api/cli/run_display.py) — running children waiting for an
admission slot are running ones, a spawner waiting for its children is not "parked"."""

from __future__ import annotations

import json
from typing import Any

import pytest

from api.cli.run_display import children_waiting_line
from api.cli.wire import FanoutProgress
from engine.operations.run_views import fanout_view
from engine.store.records import WaitingGroup
from schemas.waiting import HELD_WAITS
from tests.unit.ui_modules import NODE, module_value

pytestmark = pytest.mark.skipif(NODE is None, reason="needs Node.js")
ADMISSION = "waiting for an admission slot of http://127.0.0.1:48927 (its limit is reached)"


def js(expression: str) -> Any:
    """The value of `expression`, with waits.js's exports in scope (as `w`), as JSON."""
    return module_value("waits.js", f"((w) => {expression})(m)")


def test_the_monitor_names_held_waits_as_the_cli_does() -> None:
    assert js("w.HELD_WAITS") == HELD_WAITS


def test_children_waiting_for_an_admission_slot_are_running_ones() -> None:
    group = {"reason": "admission_wait", "children": 15, "message": ADMISSION}
    groups = json.dumps([group])
    assert js(f"w.runningWords(23, {groups})") == (
        "23 running (15 of them waiting for an admission slot)"
    )
    assert js(f"w.childrenWaitingText({json.dumps(group)})") == f"15 running children {ADMISSION}"
    rate = {"reason": "tenant_rate_limit", "children": 8, "message": ""}
    assert (
        js(f"w.childrenWaitingText({json.dumps(rate)})") == "8 children waiting: tenant rate limit"
    )


def test_children_waiting_after_an_answer_say_it_as_the_cli_does() -> None:
    """A wait that says "waiting …" itself reads on from the count, in the banner as in `runs
    show` (api/cli/run_display.py): no "waiting: waiting"."""
    redispatch = (
        "waiting to be sent again (redispatch) after https://api:443 answered 503 Service "
        "Unavailable; next in 4 s"
    )
    group = {"reason": "redispatch", "children": 327, "message": "", "text": redispatch}
    assert js(f"w.childrenWaitingText({json.dumps(group)})") == f"327 children {redispatch}"
    retry = "waiting to retry a call to https://api:443: answered 429 Too Many Requests"
    held = {"reason": "retry_backoff", "children": 64, "message": retry}
    assert js(f"w.childrenWaitingText({json.dumps(held)})") == f"64 running children {retry}"


def test_a_spawner_parked_for_its_children_waits_for_them() -> None:
    counts = {"total": 24, "succeeded": 0, "failed": 1, "cancelled": 0}
    spawner = {"type": "SPAWNER", "status": "PARKED", "children": counts}
    assert js(f"w.shownStatus({json.dumps(spawner)})") == "AWAITING_CHILDREN"
    assert js(f"w.childrenEnded({json.dumps(counts)})") == "1 of 24 ended"
    parked = {**spawner, "waiting": {"reason": "backpressure"}}
    assert js(f"w.shownStatus({json.dumps(parked)})") == "PARKED"
    gateway = {"type": "GATEWAY", "status": "PARKED", "waiting": {"reason": "breaker_open"}}
    assert js(f"w.shownStatus({json.dumps(gateway)})") == "PARKED"


def test_a_resolved_step_reads_as_resolved_not_as_a_duration() -> None:
    from api.cli.run_display import RESOLVED_WORDS

    assert js("w.RESOLVED_WORDS") == RESOLVED_WORDS == "resolved by operator"


def test_the_long_tail_says_which_children_it_counts() -> None:
    # "100 % — 12 of 12 children ended" beside "child durations (0 ended)" of a cancelled
    # fan-out: the long tail counts the children that succeeded or failed, and says so.
    heading = js('w.longTailHeading({"ended": 0})')
    assert heading == "Long tail — durations of the 0 children that succeeded or failed"
    assert "ended" not in heading
    assert js('w.longTailHeading({"ended": 1})').endswith("the 1 child that succeeded or failed")


def test_running_children_a_dead_worker_holds_are_said_as_the_cli_does() -> None:
    # The monitor's legend read "running 40" while `runs show` said 37 of them were held by
    # a worker presumed dead.
    from api.cli.fanout_words import running_words
    from api.cli.wire import FanoutProgress

    holder = {"worker": "w-2", "state": "presumed_dead", "lastSeen": 1.0, "silentS": 42.0}
    dead = [{"holder": holder, "children": 37}, {"holder": holder, "children": 1}]
    admission = [{"reason": "admission_wait", "children": 2, "message": ADMISSION}]
    for groups in ([], admission):
        fanout = FanoutProgress.model_validate(
            {"total": 100, "running": 40, "waiting": groups, "presumedDead": dead}
        )
        said = js(f"w.runningWords(40, {json.dumps(groups)}, {json.dumps(dead)})")
        assert said == running_words(fanout), said
    assert js(f"w.runningWords(40, [], {json.dumps(dead)})") == (
        "40 running (38 of them held by a worker presumed dead)"
    )
    assert js("w.runningWords(40, [], [])") == "40 running"


COUNTS = {
    "total": 3000,
    "pending": 2001,
    "running": 0,
    "succeeded": 999,
    "failed": 0,
    "cancelled": 0,
}


@pytest.mark.parametrize(
    ("reason", "said"),
    [
        ("breaker_open", "1,875 children waiting: breaker open"),
        ("redispatch", "1,875 children waiting: redispatch"),
        ("retry_backoff", "1,875 running children waiting to retry a call"),
    ],
)
def test_children_whose_waits_share_no_words_read_as_in_the_cli(reason: str, said: str) -> None:
    """A tour's outage outlived several openings of a breaker: the children's messages shared
    nothing, and the monitor's banner read "1,875 children waiting: (breaker open)" — the
    API's `text` was the reason in brackets — where `runs show` said "breaker open". The
    API's answer, as the monitor and the CLI read it, says the reason in the same words."""
    group = WaitingGroup(reason, 1875, "", 1796680459.0)
    view = fanout_view(COUNTS, [group], 1796680450.0).model_dump(by_alias=True, mode="json")
    banner = view["waiting"][0]
    assert js(f"w.childrenWaitingText({json.dumps(banner)})") == said
    cli = children_waiting_line(FanoutProgress.model_validate(view), 1796680450.0)
    assert cli == said
