"""Who did it, on both backends, through the operations layer: the key that submitted a run
(`run.created_by`, its first log line), and the audit events of administrative changes
(docs/security.md, 'Audit'), each written in the transaction of its change, listed newest
first with filters and cursors. Time is a `FakeClock`."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from cryptography.fernet import Fernet

from demo.downstream import RunningDownstream
from engine.operations import Operations
from engine.operations.audit_views import AuditAction, AuditFilter, AuditSubject
from engine.runtime import Runtime
from schemas.clock import FakeClock, utc_moment
from schemas.errors import InvalidRequest, NotFound
from tests.conftest import Backend
from tests.integration.engine_harness import running_worker, settings_for
from tests.integration.operations_harness import ended, fanout, items, single

ADMIN = "key:0a0a0a0a0a0a"
OTHER = "key:0b0b0b0b0b0b"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def ops(backend: Backend, clock: FakeClock) -> AsyncIterator[Operations]:
    settings = settings_for(backend, secret_keys=Fernet.generate_key().decode())
    runtime = await Runtime.open(settings, clock=clock)
    yield Operations(runtime)
    await runtime.close()


async def events(ops: Operations, **selection: Any) -> list[tuple[Any, ...]]:
    """(actor, action, subject kind, subject id, detail) of the events, newest first."""
    page = await ops.audit.list(AuditFilter(**selection), limit=500)
    return [
        (e.actor, e.action.value, e.subject_kind.value, e.subject_id, e.detail) for e in page.items
    ]


# ── who submitted a run ─────────────────────────────────────────────────────────────────────


async def test_a_submission_records_its_actor_on_the_run_and_in_its_log(ops: Operations) -> None:
    await ops.workflows.publish(single("one", "http://127.0.0.1:9/x"), actor=ADMIN)
    submitted = await ops.runs.submit("one", {}, tenant_id="acme", actor=OTHER)

    run = await ops.runs.get(submitted.run.id)
    assert run.created_by == OTHER
    first = (await ops.runs.logs(submitted.run.id)).items[0]
    assert first.message == f"run created by {OTHER} (one v1, the serving version)"
    assert first.data == {"actor": OTHER}


async def test_a_replay_keeps_the_first_submitters_actor(ops: Operations) -> None:
    await ops.workflows.publish(single("one", "http://127.0.0.1:9/x"))
    first = await ops.runs.submit("one", {"n": 1}, idempotency_key="k-1", actor=ADMIN)
    again = await ops.runs.submit("one", {"n": 1}, idempotency_key="k-1", actor=OTHER)

    assert (first.created, again.created, again.run.id) == (True, False, first.run.id)
    assert (await ops.runs.get(first.run.id)).created_by == ADMIN
    lines = (await ops.runs.logs(first.run.id)).items
    assert [line.message for line in lines if line.message.startswith("run created")] == [
        f"run created by {ADMIN} (one v1, the serving version)"
    ]


async def test_a_start_over_is_created_by_who_started_it_over(ops: Operations) -> None:
    await ops.workflows.publish(single("one", "http://127.0.0.1:9/x"))
    old = (await ops.runs.submit("one", {}, actor=ADMIN)).run.id
    await ops.actions.cancel(old, actor=ADMIN)
    new = (await ops.actions.start_over(old, actor=OTHER)).new_run_id

    assert (await ops.runs.get(new)).created_by == OTHER
    assert (await ops.runs.logs(new)).items[0].data == {"actor": OTHER}


async def test_children_name_no_creator_their_root_does(
    backend: Backend, downstream: RunningDownstream
) -> None:
    runtime = await Runtime.open(settings_for(backend))
    try:
        ops = Operations(runtime)
        await ops.workflows.publish(fanout(downstream.url))
        root = (await ops.runs.submit("parent", {"items": items(2)}, actor=ADMIN)).run.id
        async with running_worker(runtime):
            await ended(ops, root)
        children = (await ops.runs.children(root)).items
        assert len(children) == 2
        for child in children:
            detail = await ops.runs.get(child.id)
            assert (detail.created_by, detail.root_run_id) == (None, root)
        assert (await ops.runs.get(root)).created_by == ADMIN
    finally:
        await runtime.close()


# ── administrative changes ──────────────────────────────────────────────────────────────────


async def test_publishing_records_each_new_version_and_who_published_it(ops: Operations) -> None:
    await ops.workflows.publish(single("one", "http://127.0.0.1:9/x"), actor=ADMIN)
    await ops.workflows.publish(single("one", "http://127.0.0.1:9/x"), actor=OTHER)  # same
    await ops.workflows.publish(single("one", "http://127.0.0.1:9/y"), actor=OTHER)
    await ops.deployments.set_serving("one", 2, actor=ADMIN)

    found = await events(ops, subject_kind="workflow", subject_id="one")
    assert [(e[0], e[1], e[4]["version"]) for e in found] == [
        (ADMIN, "workflow.serving_set", 2),
        (OTHER, "workflow.published", 2),
        (ADMIN, "workflow.published", 1),
    ]
    assert found[0][4] == {"version": 2, "was": 1}
    assert set(found[1][4]) == {"version", "definitionHash"}


async def test_switching_to_the_version_that_serves_changes_and_records_nothing(
    ops: Operations, clock: FakeClock
) -> None:
    await ops.workflows.publish(single("one", "http://127.0.0.1:9/x"), actor=ADMIN)
    await ops.workflows.publish(single("one", "http://127.0.0.1:9/y"), actor=ADMIN)
    switched = await ops.deployments.set_serving("one", 2, actor=ADMIN)
    assert switched.changed
    assert switched.message == f"one: v2 serves new runs from now on (set by {ADMIN})"
    clock.advance(3600)

    again = await ops.deployments.set_serving("one", 2, actor=OTHER)

    # As a cancel of a cancelled run: said, not done. Who made it serve, and since when,
    # stay (a deployment's promotion is not overwritten by a repeated switch).
    assert not again.changed
    assert again.message == (
        f"one: v2 serves new runs already (since {utc_moment(switched.updated_at)} by "
        f"{ADMIN}): nothing to do"
    )
    assert (again.updated_at, again.updated_by) == (switched.updated_at, ADMIN)
    serving = await ops.deployments.serving("one")
    assert (serving.serving_version, serving.updated_at, serving.updated_by) == (
        2,
        switched.updated_at,
        ADMIN,
    )
    found = await events(ops, action="workflow.serving_set")
    assert [(e[0], e[4]) for e in found] == [(ADMIN, {"version": 2, "was": 1})]


async def test_key_creation_and_revocation_record_their_actor_once(
    ops: Operations, clock: FakeClock
) -> None:
    created = await ops.keys.create(tenant="acme", name="acme ci", actor=ADMIN)
    clock.advance(60)
    await ops.keys.revoke(created.id, actor=OTHER)
    await ops.keys.revoke(created.id, actor=ADMIN)  # already revoked: no second event

    page = await ops.audit.list(AuditFilter(subject_kind="api_key", subject_id=created.id))
    assert [(e.actor, e.action.value, e.at) for e in page.items] == [
        (OTHER, "key.revoked", clock.now()),
        (ADMIN, "key.created", clock.now() - 60),
    ]
    assert page.items[0].detail == {
        "name": "acme ci",
        "role": "tenant",
        "tenantId": "acme",  # the product's one name for a tenant
        "expiresAt": None,
    }
    assert created.key not in repr(page.items)


@pytest.mark.parametrize(
    ("action", "subject", "subject_id", "stored"),
    [
        (
            AuditAction.KEY_CREATED,
            AuditSubject.API_KEY,
            "0c0c0c0c0c0c",
            {"name": None, "role": "tenant", "tenant": "acme", "expiresAt": None},
        ),
        (
            AuditAction.SECRET_SET,
            AuditSubject.SECRET,
            "acme/CRM_TOKEN",
            {"tenant": "acme", "name": "CRM_TOKEN", "created": True},
        ),
    ],
)
async def test_events_stored_with_the_old_tenant_name_read_as_tenant_id(
    ops: Operations,
    action: AuditAction,
    subject: AuditSubject,
    subject_id: str,
    stored: dict[str, Any],
) -> None:
    # Rows written before details said `tenantId` are never rewritten (the trail is
    # append-only): they are read under the one name.
    await ops.runtime.store.append_alone(
        actor=ADMIN, action=action, subject=subject, subject_id=subject_id, detail=stored
    )
    (event,) = (await ops.audit.list()).items
    expected = {("tenantId" if k == "tenant" else k): v for k, v in stored.items()}
    assert event.detail == expected
    assert list(event.detail or {}) == list(expected)  # in the order it was written


async def test_tenant_limits_and_destination_caps_record_their_actor(ops: Operations) -> None:
    await ops.settings.set_quota("acme", 10, actor=ADMIN)
    await ops.settings.reset_quota("acme", actor=ADMIN)
    await ops.settings.reset_quota("acme", actor=ADMIN)  # had none: nothing recorded
    await ops.settings.set_tenant_rate("acme", 60, actor=OTHER)
    await ops.settings.reset_tenant_rate("acme", actor=OTHER)
    dest = "https://api.example.com:443"
    await ops.settings.set_caps(dest, 5, actor=ADMIN)
    await ops.settings.change_caps(dest, rate_per_second=2.0, actor=OTHER)
    await ops.settings.remove_caps(dest, actor=ADMIN)
    await ops.settings.remove_caps(dest, actor=ADMIN)  # had none: nothing recorded

    assert await events(ops, subject_kind="tenant", subject_id="acme") == [
        (OTHER, "tenant.rate_reset", "tenant", "acme", None),
        (OTHER, "tenant.rate_set", "tenant", "acme", {"perMinute": 60}),
        (ADMIN, "tenant.quota_reset", "tenant", "acme", None),
        (ADMIN, "tenant.quota_set", "tenant", "acme", {"maxRuns": 10}),
    ]
    assert await events(ops, subject_kind="destination") == [
        (
            ADMIN,
            "destination.caps_removed",
            "destination",
            dest,
            {"maxConcurrency": 5, "ratePerSecond": 2.0},
        ),
        (
            OTHER,
            "destination.caps_set",
            "destination",
            dest,
            {"changed": {"ratePerSecond": 2.0}, "maxConcurrency": 5, "ratePerSecond": 2.0},
        ),
        (
            ADMIN,
            "destination.caps_set",
            "destination",
            dest,
            {
                "changed": {"maxConcurrency": 5, "ratePerSecond": None},
                "maxConcurrency": 5,
                "ratePerSecond": None,
            },
        ),
    ]


async def test_a_deleted_secret_leaves_its_history(ops: Operations) -> None:
    value = "s3cret-value-1234"
    await ops.secrets.set("acme", "CRM_TOKEN", value, actor=ADMIN)
    await ops.secrets.set("acme", "CRM_TOKEN", value + "5", actor=OTHER)
    await ops.secrets.delete("acme", "CRM_TOKEN", actor=ADMIN)
    with pytest.raises(NotFound):
        await ops.secrets.delete("acme", "CRM_TOKEN", actor=ADMIN)

    found = await events(ops, subject_kind="secret", subject_id="acme/CRM_TOKEN")
    assert [(actor, action) for actor, action, *_ in found] == [
        (ADMIN, "secret.deleted"),
        (OTHER, "secret.set"),
        (ADMIN, "secret.set"),
    ]
    assert found[0][4]["updatedBy"] == OTHER
    assert {e[4]["tenantId"] for e in found} == {"acme"} and "tenant" not in found[0][4]
    assert [e[4]["created"] for e in found[1:]] == [False, True]
    assert value not in repr(found)
    assert (await ops.secrets.list("acme")).items == []


async def test_a_rotation_records_each_secret_it_re_encrypted(ops: Operations) -> None:
    await ops.secrets.set("acme", "CRM_TOKEN", "s3cret-value-1234", actor=ADMIN)
    await ops.secrets.set("globex", "ERP_TOKEN", "s3cret-value-5678", actor=ADMIN)
    rotated = await ops.secrets.rotate(actor="cli")

    assert rotated.rotated == 2
    found = await events(ops, action="secret.rotated")
    assert sorted(found) == [
        ("cli", "secret.rotated", "secret", "acme/CRM_TOKEN", {"keyId": rotated.key_id}),
        ("cli", "secret.rotated", "secret", "globex/ERP_TOKEN", {"keyId": rotated.key_id}),
    ]


async def test_a_breaker_reset_by_hand_records_what_it_closed(ops: Operations) -> None:
    destination = "https://billing.example.com:443"
    admission = ops.runtime.admission
    for _ in range(5):  # the tenant layer's threshold: acme's layer opens
        ticket = await admission.admit(destination, "acme", wait_timeout_s=0, lease_s=30)
        await ticket.failure()

    reset = await ops.settings.reset_breakers(destination, actor=ADMIN)
    assert [(c.layer, c.tenant_id) for c in reset.closed] == [("tenant", "acme")]
    again = await ops.settings.reset_breakers(destination, actor=OTHER)
    assert again.closed == []  # nothing closed: no event

    assert await events(ops, subject_kind="destination") == [
        (
            ADMIN,
            "destination.breakers_reset",
            "destination",
            destination,
            {"tenantId": None, "closed": [{"layer": "tenant", "tenantId": "acme", "was": "open"}]},
        )
    ]


async def test_a_breaker_reset_holds_when_its_event_cannot_be_written(
    ops: Operations, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The reset happened in Redis before the event is written: a database gone at that
    moment does not turn it into an error the operator would act on again; it is logged."""
    destination = "https://billing.example.com:443"
    for _ in range(5):
        ticket = await ops.runtime.admission.admit(
            destination, "acme", wait_timeout_s=0, lease_s=30
        )
        await ticket.failure()

    async def database_gone(**_: Any) -> None:
        raise ConnectionRefusedError("the database went away")

    monkeypatch.setattr(ops.runtime.store, "append_alone", database_gone)
    with caplog.at_level(logging.ERROR, logger="engine.operations.settings"):
        reset = await ops.settings.reset_breakers(destination, actor=ADMIN)

    assert [c.tenant_id for c in reset.closed] == ["acme"]
    said = [r.getMessage() for r in caplog.records if r.name == "engine.operations.settings"]
    assert said == [
        f"the breakers of {destination} were closed by {ADMIN}, but the audit event could not "
        "be written (database unavailable: the database went away)"
    ]


async def test_a_change_rolled_back_leaves_no_event(ops: Operations) -> None:
    """The event is written in the change's transaction: caps whose copy to Redis fails are
    not stored, and neither is their event."""

    async def redis_fails(cap: int, rate: float | None) -> None:
        raise ConnectionError("Redis went away")

    with pytest.raises(ConnectionError):
        await ops.runtime.store.change_destination_caps(
            "https://api.example.com:443", {"max_concurrency": 3}, redis_fails, actor=ADMIN
        )
    assert await ops.runtime.store.get_destination_caps("https://api.example.com:443") is None
    assert await events(ops) == []


# ── the list ────────────────────────────────────────────────────────────────────────────────


async def test_pages_follow_each_other_under_a_filter(ops: Operations) -> None:
    for n in range(7):
        await ops.settings.set_quota(f"t{n}", n, actor=ADMIN if n % 2 else OTHER)
    selection = AuditFilter(actor=ADMIN)
    first = await ops.audit.list(selection, limit=2)
    assert first.next is not None
    await ops.settings.set_quota("late", 1, actor=ADMIN)  # newer: not in the next pages
    second = await ops.audit.list(selection, limit=2, cursor=first.next)
    assert second.next is None
    assert [e.subject_id for e in first.items + second.items] == ["t5", "t3", "t1"]

    with pytest.raises(InvalidRequest) as other_filter:
        await ops.audit.list(AuditFilter(actor=OTHER), limit=2, cursor=first.next)
    assert other_filter.value.code == "invalid_cursor"


async def test_an_actor_named_without_a_colon_takes_every_actor_of_its_kind(
    ops: Operations,
) -> None:
    """`cli` names every `cli:<user>@<host>` (and a bare `cli` recorded before actors named
    their user), in its own case; a whole actor names itself alone."""
    actors = ["cli", "cli:ana@ops-1", "cli:bo@ops-2", "client:x", "CLI:eve@h", ADMIN]
    for n, actor in enumerate(actors):
        await ops.settings.set_quota(f"k{n}", n, actor=actor)
    assert [e[0] for e in await events(ops, actor="cli")] == [
        "cli:bo@ops-2",
        "cli:ana@ops-1",
        "cli",
    ]
    assert [e[0] for e in await events(ops, actor="cli:ana@ops-1")] == ["cli:ana@ops-1"]
    assert [e[0] for e in await events(ops, actor="key")] == [ADMIN]
    assert await events(ops, actor="cl") == []


@pytest.mark.parametrize(
    ("selection", "parameter"),
    [
        (AuditFilter(action="key.deleted"), "action"),
        (AuditFilter(subject_kind="run"), "subjectKind"),
        (AuditFilter(subject_id="acme"), "subjectId"),
    ],
)
async def test_a_filter_no_event_can_match_is_refused(
    ops: Operations, selection: AuditFilter, parameter: str
) -> None:
    with pytest.raises(InvalidRequest) as refused:
        await ops.audit.list(selection)
    assert refused.value.code == "invalid_filter"
    assert refused.value.details["parameter"] == parameter
