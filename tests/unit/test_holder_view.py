"""Who holds a RUNNING step as the run views show it (`run_views.holder_view`): judged by the
heartbeat rule of `GET /services` (`ServiceStatus.up`), the worker named for an admin and not
for a tenant, `unknown` when Redis did not answer, no named worker holds it, or this Redis
never heard of the holder."""

from __future__ import annotations

import dataclasses

from engine.coordination.heartbeat import ServiceStatus
from engine.operations.run_views import Holders, fanout_view, holder_view
from engine.store import records
from engine.store.records import StepRecord
from tests.unit.test_retry_wait_view import step as record

NOW = 1_000.0


def step(status: str = "RUNNING", claimed_by: str | None = "w-1") -> StepRecord:
    return dataclasses.replace(
        record(None, status), claim_token="b:1", lease_expires_at=NOW + 20, claimed_by=claimed_by
    )


def seen(up: bool, last_seen: float | None) -> dict[str, ServiceStatus]:
    return {"w-1": ServiceStatus("w-1", up=up, pid=7, uptime_s=1.0, last_seen=last_seen)}


def test_a_holder_whose_heartbeat_is_stale_is_presumed_dead() -> None:
    view = holder_view(step(), Holders(seen(False, NOW - 42), show_worker=True, now=NOW))
    assert view is not None
    assert (view.worker, view.state, view.last_seen, view.silent_s) == (
        "w-1",
        "presumed_dead",
        NOW - 42,
        42.0,
    )


def test_a_live_holder_is_alive_and_a_tenant_is_not_told_which() -> None:
    view = holder_view(step(), Holders(seen(True, NOW - 3), show_worker=False, now=NOW))
    assert view is not None
    assert (view.worker, view.state, view.silent_s) == (None, "alive", 3.0)


def test_redis_not_answering_or_no_named_holder_is_unknown() -> None:
    silent = holder_view(step(), Holders(None, show_worker=True, now=NOW))
    assert silent is not None and (silent.worker, silent.state) == ("w-1", "unknown")
    unnamed = holder_view(step(claimed_by=None), Holders({}, show_worker=True, now=NOW))
    assert unnamed is not None and (unnamed.worker, unnamed.state) == (None, "unknown")


def test_a_holder_this_redis_never_heard_of_is_unknown_not_dead() -> None:
    # With the embedded Redis a separate worker process beats into a Redis of its own.
    never = holder_view(step(), Holders(seen(False, None), show_worker=True, now=NOW))
    assert never is not None and (never.worker, never.state, never.silent_s) == (
        "w-1",
        "unknown",
        None,
    )


def test_only_a_running_step_has_a_holder() -> None:
    holders = Holders(seen(True, NOW), show_worker=True, now=NOW)
    assert holder_view(step(status="READY", claimed_by=None), holders) is None
    assert holder_view(step(), None) is None


def test_a_holder_restarted_at_once_under_its_name_is_presumed_dead() -> None:
    """kill -9, then the same name at once: the live beat is the new process's, started after
    the claim was last renewed (its lease's end less the lease), so the holder is gone."""
    lease_s = 30.0
    renewed = NOW + 20 - lease_s  # step()'s lease ends at NOW + 20
    restarted = {
        "w-1": ServiceStatus(
            "w-1", up=True, pid=8, uptime_s=1.0, last_seen=NOW - 0.8, started_at=renewed + 5
        )
    }
    view = holder_view(step(), Holders(restarted, show_worker=True, now=NOW, lease_s=lease_s))
    assert view is not None
    assert (view.worker, view.state, view.last_seen, view.silent_s) == (
        "w-1",
        "presumed_dead",
        renewed,
        10.0,
    )
    # The same process renewing its own claim is alive (it started before it claimed).
    own = {"w-1": dataclasses.replace(restarted["w-1"], started_at=renewed - 60)}
    alive = holder_view(step(), Holders(own, show_worker=True, now=NOW, lease_s=lease_s))
    assert alive is not None and alive.state == "alive"


def test_a_holder_is_judged_by_its_own_lease_when_its_heartbeat_says_it() -> None:
    """The worker renews by its SCHEMABRIDGE_LEASE_S (6 s), the reader's is 30 s: by the
    reader's, the live worker's last renewal (NOW + 5 - 30) would date before it started
    (NOW - 5) and read it presumed dead; by the lease its heartbeat says (NOW - 1), it is
    alive."""
    renewing = dataclasses.replace(step(), lease_expires_at=NOW + 5)
    live = {
        "w-1": ServiceStatus(
            "w-1", up=True, pid=8, uptime_s=1.0, last_seen=NOW, started_at=NOW - 5, lease_s=6.0
        )
    }
    view = holder_view(renewing, Holders(live, show_worker=True, now=NOW, lease_s=30.0))
    assert view is not None and view.state == "alive", view
    # A heartbeat without its lease (an older process) is judged by the reader's.
    older = {"w-1": dataclasses.replace(live["w-1"], lease_s=None)}
    judged = holder_view(renewing, Holders(older, show_worker=True, now=NOW, lease_s=30.0))
    assert judged is not None and judged.state == "presumed_dead", judged
    assert judged.last_seen == NOW + 5 - 30.0


def test_a_holder_restarted_with_a_shorter_lease_is_presumed_dead() -> None:
    """The tour: a worker leasing 90 s killed, restarted under its name leasing 30 s. Its
    dead claim's lease (renewed at NOW - 30, ending at NOW + 60) dated, by the live
    process's lease, a renewal after that process started (NOW + 30), and read "alive". A
    lease ending later than the live process's own lease from now is not its."""
    dead = dataclasses.replace(step(), lease_expires_at=NOW + 60)
    restarted = {
        "w-1": ServiceStatus(
            "w-1", up=True, pid=8, uptime_s=10.0, last_seen=NOW - 2, started_at=NOW - 10, lease_s=30
        )
    }
    view = holder_view(dead, Holders(restarted, show_worker=True, now=NOW, lease_s=30.0))
    assert view is not None
    # Its renewal is unknown, only that it came before the live process started.
    assert (view.state, view.last_seen, view.silent_s) == ("presumed_dead", NOW - 10, 10.0)
    # The live process's own claim, renewed just now, is its own.
    own = dataclasses.replace(step(), lease_expires_at=NOW + 30)
    alive = holder_view(own, Holders(restarted, show_worker=True, now=NOW, lease_s=30.0))
    assert alive is not None and alive.state == "alive", alive


def test_a_fanout_counts_the_running_children_of_each_dead_holder_most_first() -> None:
    """Judged as a step's holder is, by the latest lease of its claims: children of a live
    worker, of one this Redis never heard of, or read with Redis silent are not counted."""
    statuses = {
        "w-1": ServiceStatus("w-1", up=False, pid=7, uptime_s=1.0, last_seen=NOW - 42),
        "w-2": ServiceStatus("w-2", up=True, pid=8, uptime_s=1.0, last_seen=NOW - 1),
        "w-4": ServiceStatus("w-4", up=False, pid=9, uptime_s=1.0, last_seen=NOW - 90),
    }
    held = [
        records.HeldChildren("w-1", 3, NOW + 20),
        records.HeldChildren("w-2", 5, NOW + 25),
        records.HeldChildren("w-3", 2, NOW + 25),
        records.HeldChildren("w-4", 7, NOW + 5),
    ]
    counts = {"total": 20, "pending": 3, "running": 17, "succeeded": 0, "failed": 0}
    counts |= {"cancelled": 0}
    fanout = fanout_view(counts, [], NOW, held, Holders(statuses, show_worker=True, now=NOW))
    assert [(d.holder.worker, d.children, d.lease_expires_at) for d in fanout.presumed_dead] == [
        ("w-4", 7, NOW + 5),
        ("w-1", 3, NOW + 20),
    ]
    assert fanout.presumed_dead[1].holder.silent_s == 42.0
    tenant = fanout_view(counts, [], NOW, held, Holders(statuses, show_worker=False, now=NOW))
    assert [(d.holder.worker, d.children) for d in tenant.presumed_dead] == [(None, 7), (None, 3)]
    silent = fanout_view(counts, [], NOW, held, Holders(None, show_worker=True, now=NOW))
    assert silent.presumed_dead == []
    assert fanout_view(counts, [], NOW).presumed_dead == []


def test_dead_holders_of_as_many_children_are_listed_in_one_order_however_read() -> None:
    # The database groups the children by holder in no set order: two reads that listed the
    # same holders in turn were a change of the progress, an event of its stream each.
    statuses = {
        name: ServiceStatus(name, up=False, pid=7, uptime_s=1.0, last_seen=NOW - 42)
        for name in ("w-1", "w-2", "w-3")
    }
    held = [records.HeldChildren(name, 3, NOW + int(name[-1])) for name in ("w-2", "w-3", "w-1")]
    counts = {"total": 9, "pending": 0, "running": 9, "succeeded": 0, "failed": 0}
    counts |= {"cancelled": 0}
    for show_worker in (True, False):
        judged = Holders(statuses, show_worker=show_worker, now=NOW)
        once = fanout_view(counts, [], NOW, held, judged)
        again = fanout_view(counts, [], NOW, held[::-1], judged)
        assert once == again, (once.presumed_dead, again.presumed_dead)
