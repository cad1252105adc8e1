"""The run catalogue: published workflow versions, runs, their steps, logs and children."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from sqlalchemy import Float, Integer, bindparam, func, insert, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.store import audit, deployment_rows, listing, pins, restarts
from engine.store import children as fanout
from engine.store import operator_settings as settings_
from engine.store import results as results_
from engine.store.core import (
    StoreCore,
    UnknownWorkflow,
    definition_hash,
    logs,
    run_record,
    runs,
    step_record,
    step_rows,
    steps,
    stored_document,
    versions,
)
from engine.store.dialect import dialect_of
from engine.store.direct import DirectStatements
from engine.store.listing import LogRecord, log_record
from engine.store.models import (
    AuditAction,
    AuditSubject,
    RunRoute,
    RunStatus,
    TenantQuota,
)
from engine.store.records import (
    HeldChildren,
    LeaseRanges,
    LogLine,
    RunHeader,
    RunRecord,
    StepRecord,
    VersionRecord,
    WaitingGroup,
)
from schemas.definitions import Workflow

quotas = TenantQuota.__table__  # type: ignore[attr-defined]
serving_table = deployment_rows.serving


PUBLISH_ATTEMPTS = 3
"""Transactions `publish_all` tries when concurrent publishers collide on a version number."""


class QuotaExhausted(Exception):
    """The tenant's run quota has no run left for a new root run."""


TAKE_QUOTA = (
    update(quotas)
    .where(quotas.c.tenant_id == bindparam("tenant"))
    .values(used_runs=quotas.c.used_runs + 1)
    .returning(quotas.c.used_runs, quotas.c.max_runs)
)
"""Count one more run on the tenant's quota (parameter `tenant`), answering the new count and
the maximum; no row: a tenant without a quota."""
INSERT_RUN = insert(runs).execution_options(deferred=True)
INSERT_STEPS = insert(steps).execution_options(deferred=True)
"""A new run's rows: deferred, so on SQLite they ride with the COMMIT, one hop for the whole
transaction (`engine.store.sqlite_cursor`); a duplicate idempotency key surfaces there."""


async def _take_quota(conn: AsyncConnection, tenant_id: str) -> bool:
    """Use one run of the tenant's quota; False when it has a quota and none is left.

    One statement whatever the tenant: the increment takes the row lock, so concurrent
    submissions count one after the other, and a refused one is undone by the caller's
    rollback (its transaction creates nothing)."""
    row = (await conn.execute(TAKE_QUOTA, {"tenant": tenant_id})).first()
    return row is None or row.used_runs <= row.max_runs


CREATE_RUN_AT_ONCE = text(
    """
    WITH quota AS (
        UPDATE tenant_quota SET used_runs = used_runs + 1
        WHERE tenant_id = :tenant_id AND used_runs < max_runs AND CAST(:count_in_quota AS BOOLEAN)
        RETURNING 1
    ), allowed AS (
        SELECT NOT CAST(:count_in_quota AS BOOLEAN)
            OR EXISTS (SELECT 1 FROM quota)
            OR NOT EXISTS (SELECT 1 FROM tenant_quota WHERE tenant_id = :tenant_id) AS ok
    ), new_run AS (
        INSERT INTO run (
            id, workflow_name, workflow_version, definition_hash, tenant_id, status,
            timeout_tier, input, output, error, steps_remaining, created_at, started_at,
            ended_at, idempotency_key, root_run_id, restarted_from, pinned_versions,
            request_hash, route, created_by
        )
        SELECT
            :id, :workflow_name, :workflow_version, :definition_hash, :tenant_id, :status,
            :timeout_tier, CAST(:input AS JSON), CAST(:output AS JSON), CAST(:error AS JSON),
            :steps_remaining, :created_at, :started_at, :ended_at, :idempotency_key,
            :root_run_id, :restarted_from, CAST(:pinned_versions AS JSON), :request_hash, :route,
            :created_by
        FROM allowed WHERE allowed.ok
        RETURNING id
    ), new_steps AS (
        INSERT INTO step (
            run_id, vertex_id, tenant_id, status, deps_pending, attempts, auto_retries,
            not_before, created_at
        )
        SELECT new_run.id, v.vertex_id, :tenant_id, v.status, v.deps_pending, 0, 0,
            :created_at, :created_at
        FROM new_run, unnest(
            CAST(:s_vertex_id AS VARCHAR[]), CAST(:s_status AS VARCHAR[]),
            CAST(:s_deps_pending AS INTEGER[])
        ) AS v(vertex_id, status, deps_pending)
    ), new_log AS (
        INSERT INTO run_log (run_id, vertex_id, at, level, message, data)
        SELECT new_run.id, NULL, :created_at, 'info', :message, CAST(:log_data AS JSON)
        FROM new_run
    )
    SELECT ok FROM allowed
    """
).bindparams(
    bindparam("workflow_version", type_=Integer),
    bindparam("steps_remaining", type_=Integer),
    bindparam("created_at", type_=Float),
    bindparam("started_at", type_=Float),
    bindparam("ended_at", type_=Float),
)
"""A root run, its steps and its first log line, and one run of its tenant's quota, as one
statement (PostgreSQL's data-modifying WITH): atomic in autocommit, so no BEGIN and COMMIT
round trips, and four statements' client work become one. The quota is taken only while one
is left (`used_runs < max_runs`, rechecked on the locked row under concurrent submissions);
`ok` false: none was left and nothing was written. JSON values travel as the text
SQLAlchemy's JSON type binds, so the rows are those `INSERT_RUN` and `insert_logs` write."""


async def _create_run_at_once(
    direct: DirectStatements,
    row: dict[str, Any],
    workflow: Workflow,
    message: str,
    count_in_quota: bool,
    *,
    log_data: dict[str, Any] | None,
) -> bool:
    """Run `CREATE_RUN_AT_ONCE` for the run `row` of `workflow` (on asyncpg directly, see
    `engine.store.direct`); False when the tenant's quota had no run left (nothing written).
    A taken idempotency key raises IntegrityError."""
    as_json = results_.json_text(direct.dialect)
    rows = step_rows(row["id"], row["tenant_id"], workflow, row["created_at"])
    params = {key: as_json(row[key]) if key in _JSON_COLUMNS else row[key] for key in row}
    params |= {
        "s_vertex_id": [r["vertex_id"] for r in rows],
        "s_status": [r["status"] for r in rows],
        "s_deps_pending": [r["deps_pending"] for r in rows],
        "message": message,
        "log_data": as_json(log_data),
        "count_in_quota": count_in_quota,
    }
    return bool(await direct.fetchval(CREATE_RUN_AT_ONCE, params))


_JSON_COLUMNS = frozenset({"input", "output", "error", "pinned_versions"})


def created_line(version: VersionRecord, route: str | None, actor: str | None) -> str:
    """The first line of a run's log: what was created, by whom (`actor`, in the operator
    actions' words; left out when the caller named nobody) and how its version was chosen."""
    how = {
        RunRoute.SERVING.value: ", the serving version",
        RunRoute.CANDIDATE.value: ", a deployment's candidate",
        RunRoute.PINNED.value: ", as the request asked",
        RunRoute.START_OVER.value: ", the version of the run started over",
    }.get(route or "", "")
    by = "" if actor is None else f" by {actor}"
    return f"run created{by} ({version.name} v{version.version}{how})"


def created_data(actor: str | None) -> dict[str, Any] | None:
    """The data of a run's first log line: its creator, as operator actions' lines name
    theirs (`actor`)."""
    return None if actor is None else {"actor": actor}


class RunCatalogue(StoreCore):
    """Workflows and runs: publish and read versions, create and read runs."""

    async def publish(self, workflow: Workflow, *, actor: str | None = None) -> VersionRecord:
        """Store `workflow` as a new immutable version, unless the latest version is identical."""
        ((record, _),) = await self.publish_all([workflow], actor=actor)
        return record

    async def publish_all(
        self,
        workflows: Sequence[Workflow],
        *,
        by_content: bool = False,
        serve_as: str | None = None,
        actor: str | None = None,
    ) -> list[tuple[VersionRecord, bool]]:
        """Publish `workflows` together, in one transaction (a parent is never stored without
        the child published with it). Returns (version, created) per workflow, in order: a
        workflow identical to its latest version is not stored again (created False);
        `by_content`: identical to any of its versions (the engine's system workflows, which
        alternate between a few shapes).

        `serve_as` (only `serve --demo`): in the same transaction, each version published
        becomes its workflow's serving version, recorded as `serve_as`'s doing, unless a
        deployment of that workflow is running (its routing is left alone); each decision is
        logged (`deployment_rows.serve_unless_deploying`).

        Each version created is an audit event (`workflow.published`) of `actor` (who
        publishes: `key:<id>`, `cli`, `serve --demo`), in the same transaction.

        Two publishers racing on a name collide on the (name, version) key; the loser runs its
        transaction again and then finds the winner's version."""
        for attempt in range(PUBLISH_ATTEMPTS):
            try:
                async with self._engines.write.begin() as conn:
                    published = [
                        await self._publish_one(conn, w, by_content=by_content) for w in workflows
                    ]
                    for record, created in published:
                        if created:
                            await audit.append(
                                conn,
                                at=record.created_at,
                                actor=actor,
                                action=AuditAction.WORKFLOW_PUBLISHED,
                                subject=AuditSubject.WORKFLOW,
                                subject_id=record.name,
                                detail={
                                    "version": record.version,
                                    "definitionHash": record.definition_hash,
                                },
                            )
                    if serve_as is not None:
                        for record, _ in published:
                            await deployment_rows.serve_unless_deploying(
                                conn, record.name, record.version, self._clock.now(), serve_as
                            )
            except IntegrityError:
                if attempt == PUBLISH_ATTEMPTS - 1:
                    raise
                continue
            for record, _ in published:  # cached once committed: versions never change
                self._versions[(record.name, record.version)] = record
            return published
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _publish_one(
        self, conn: AsyncConnection, workflow: Workflow, *, by_content: bool
    ) -> tuple[VersionRecord, bool]:
        document = stored_document(workflow)
        digest = definition_hash(document)
        columns = (versions.c.version, versions.c.definition_hash, versions.c.created_at)
        named = versions.c.name == workflow.name
        latest = (
            await conn.execute(
                select(*columns).where(named).order_by(versions.c.version.desc()).limit(1)
            )
        ).first()
        same = latest if latest is not None and latest.definition_hash == digest else None
        if same is None and latest is not None and by_content:
            query = select(*columns).where(named, versions.c.definition_hash == digest).limit(1)
            same = (await conn.execute(query)).first()
        if same is not None:
            return VersionRecord(
                workflow.name, same.version, digest, workflow, same.created_at
            ), False
        version = 1 if latest is None else latest.version + 1
        now = self._clock.now()
        await conn.execute(
            insert(versions).values(
                name=workflow.name,
                version=version,
                definition=document,
                definition_hash=digest,
                created_at=now,
            )
        )
        if version == 1:
            # The first version serves at once; later ones get traffic only through a
            # deployment or an operator's switch (docs/architecture.md, 'Versions and
            # deployments').
            first = (
                dialect_of(conn)
                .insert(serving_table)
                .values(name=workflow.name, serving_version=1, updated_at=now, updated_by="publish")
            )
            await conn.execute(first.on_conflict_do_nothing(index_elements=["name"]))
        return VersionRecord(workflow.name, version, digest, workflow, now), True

    async def list_versions(self, name: str | None = None) -> list[tuple[str, int, str, float]]:
        """(name, version, hash, created_at) of every published version, newest first."""
        query = select(
            versions.c.name, versions.c.version, versions.c.definition_hash, versions.c.created_at
        ).order_by(versions.c.name, versions.c.version.desc())
        if name is not None:
            query = query.where(versions.c.name == name)
        async with self._engines.read.connect() as conn:
            return [tuple(r) for r in (await conn.execute(query)).all()]

    # ── runs ────────────────────────────────────────────────────────────────────────────────

    async def create_run(
        self,
        version: VersionRecord,
        run_input: Any,
        *,
        tenant_id: str = "default",
        timeout_tier: str = "process",
        run_id: str | None = None,
        idempotency_key: str | None = None,
        restarted_from: str | None = None,
        pinned_versions: dict[str, int] | None = None,
        request_hash: str | None = None,
        count_in_quota: bool = False,
        route: str | None = None,
        child_versions: Mapping[str, int] | None = None,
        created_by: str | None = None,
    ) -> tuple[RunRecord, bool]:
        """Create a RUNNING root run with its steps (roots READY). Returns (run, created).

        With an `idempotency_key` that already exists, the existing run is returned and
        nothing is created (`created` False): the key's unique index refuses the insert, the
        transaction is rolled back (quota included) and the run holding the key is read — the
        same path whether the key was used long ago or by a concurrent creation that committed
        first. (Callers that expect repeats look the key up first, as a submission does.)
        `count_in_quota`: the run uses one of its tenant's quota runs, in the same transaction
        (a tenant without a quota is unlimited); none left raises `QuotaExhausted`.
        `pinned_versions` is the version of each child workflow the run tree uses (see
        `engine.store.pins`); None (the default) resolves it now: the serving version of
        every child workflow reachable through spawners, or for the workflows named in
        `child_versions` the version given there (`schemabridge run` pins what it has just
        published). `route` records how the submission chose `version` (`RunRoute`).
        `created_by`: who submitted it (`key:<id>`, `demo`, `cli`), one more value of the
        same INSERT, and named in the run's first log line.
        """
        if pinned_versions is None:
            pinned_versions = await self._resolve_pins(version.workflow, child_versions or {})
        run_id = run_id or str(uuid.uuid4())
        now = self._clock.now()
        workflow = version.workflow
        row = {
            "id": run_id,
            "workflow_name": version.name,
            "workflow_version": version.version,
            "definition_hash": version.definition_hash,
            "tenant_id": tenant_id,
            "status": RunStatus.RUNNING.value,
            "timeout_tier": timeout_tier,
            "input": run_input,
            "steps_remaining": len(workflow.vertices),
            "created_at": now,
            "started_at": now,
            "idempotency_key": idempotency_key,
            "root_run_id": run_id,
            "restarted_from": restarted_from,
            "pinned_versions": pinned_versions,
            "request_hash": request_hash,
            "route": route,
            "created_by": created_by,
            "output": None,
            "error": None,
            "ended_at": None,
        }
        message = created_line(version, route, created_by)
        log_data = created_data(created_by)
        try:
            direct = self._engines.direct
            if direct is not None:  # PostgreSQL: one statement, in autocommit
                created = await _create_run_at_once(
                    direct, row, workflow, message, count_in_quota, log_data=log_data
                )
                # The statement refuses when its snapshot holds a quota row its UPDATE took
                # nothing from, which is also the case of a row deleted while the UPDATE
                # waited for its lock: no quota now is unlimited (as in a transaction, which
                # would have found no row).
                if not created:
                    async with self._engines.read.connect() as conn:
                        gone = await settings_.read_quota(conn, tenant_id) is None
                    if gone:
                        created = await _create_run_at_once(
                            direct, row, workflow, message, count_in_quota, log_data=log_data
                        )
                if not created:
                    raise QuotaExhausted(f"tenant {tenant_id} has no runs left in its quota")
            else:
                async with self._engines.write.begin() as conn:
                    if count_in_quota and not await _take_quota(conn, tenant_id):
                        raise QuotaExhausted(f"tenant {tenant_id} has no runs left in its quota")
                    # Parameters apart from the statement: one compiled INSERT, cached.
                    await conn.execute(INSERT_RUN, row)
                    await conn.execute(INSERT_STEPS, step_rows(run_id, tenant_id, workflow, now))
                    await results_.insert_logs(
                        conn, [LogLine(run_id, "info", message, data=log_data)], now
                    )
        except IntegrityError:
            existing = None if idempotency_key is None else await self.run_by_key(idempotency_key)
            if existing is None:
                raise
            return existing, False
        return run_record(row), True

    async def create_runs(
        self,
        version: VersionRecord,
        inputs: Sequence[Any],
        *,
        tenant_id: str = "default",
        timeout_tier: str = "process",
    ) -> list[str]:
        """Create one RUNNING root run per input in a single transaction (bulk submission),
        all with the child versions resolved now (as `create_run`)."""
        now = self._clock.now()
        workflow = version.workflow
        ids = [str(uuid.uuid4()) for _ in inputs]
        pinned = await self._resolve_pins(workflow) if ids else None
        rows = [
            {
                "id": run_id,
                "workflow_name": version.name,
                "workflow_version": version.version,
                "definition_hash": version.definition_hash,
                "tenant_id": tenant_id,
                "status": RunStatus.RUNNING.value,
                "timeout_tier": timeout_tier,
                "input": run_input,
                "steps_remaining": len(workflow.vertices),
                "created_at": now,
                "started_at": now,
                "root_run_id": run_id,
                "pinned_versions": pinned,
            }
            for run_id, run_input in zip(ids, inputs, strict=True)
        ]
        if rows:
            async with self._engines.write.begin() as conn:
                await conn.execute(insert(runs), rows)
                await conn.execute(
                    insert(steps),
                    [r for run_id in ids for r in step_rows(run_id, tenant_id, workflow, now)],
                )
            await self._grew(len(rows) * (1 + len(workflow.vertices)))
        return ids

    async def _resolve_pins(
        self, workflow: Workflow, chosen: Mapping[str, int] | None = None
    ) -> dict[str, int]:
        """The version of every child workflow reachable from `workflow` through spawners
        that name no version: the one `chosen` names, else its serving version now (see
        `engine.store.pins`)."""
        chosen = chosen or {}

        async def serving(names: Collection[str]) -> dict[str, int]:
            found = {name: chosen[name] for name in names if name in chosen}
            names = [name for name in names if name not in chosen]
            if not names:
                return found
            async with self._engines.read.connect() as conn:
                found.update(await deployment_rows.serving_versions(conn, names))
                missing = sorted(set(names) - set(found))
                if missing:  # no serving row (not expected after migration 0013): the latest
                    query = (
                        select(versions.c.name, func.max(versions.c.version))
                        .where(versions.c.name.in_(missing))
                        .group_by(versions.c.name)
                    )
                    found.update({n: int(v) for n, v in (await conn.execute(query)).all()})
            return found

        async def load(name: str, version: int) -> Workflow | None:
            try:
                return (await self.get_version(name, version)).workflow
            except UnknownWorkflow:
                return None

        return await pins.resolve(workflow, serving, load)

    async def run_by_key(self, key: str) -> RunRecord | None:
        """The run created with idempotency key `key`, if any."""
        async with self._engines.read.connect() as conn:
            row = (await conn.execute(select(runs).where(runs.c.idempotency_key == key))).first()
        return None if row is None else run_record(row._mapping)

    async def get_run(self, run_id: str) -> RunRecord | None:
        async with self._engines.read.connect() as conn:
            row = (await conn.execute(select(runs).where(runs.c.id == run_id))).first()
        return None if row is None else run_record(row._mapping)

    async def get_steps(self, run_id: str) -> list[StepRecord]:
        query = select(steps).where(steps.c.run_id == run_id).order_by(steps.c.id)
        async with self._engines.read.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [step_record(r._mapping) for r in rows]

    async def run_logs(self, run_id: str, *, after_id: int = 0, limit: int = 500) -> list[Any]:
        query = (
            select(logs)
            .where(logs.c.run_id == run_id, logs.c.id > after_id)
            .order_by(logs.c.id)
            .limit(limit)
        )
        async with self._engines.read.connect() as conn:
            return [dict(r._mapping) for r in (await conn.execute(query)).all()]

    async def latest_log_at(self, run_id: str, vertex_id: str) -> float | None:
        """When the latest log line of `run_id`'s step `vertex_id` was written (None: none):
        read newest first along `ix_run_log_run`, one row."""
        query = (
            select(logs.c.at)
            .where(logs.c.run_id == run_id, logs.c.vertex_id == vertex_id)
            .order_by(logs.c.id.desc())
            .limit(1)
        )
        async with self._engines.read.connect() as conn:
            found = (await conn.execute(query)).scalar()
        return None if found is None else float(found)

    async def count_runs(self, status: str | None = None) -> int:
        query = select(func.count()).select_from(runs)
        if status is not None:
            query = query.where(runs.c.status == status)
        async with self._engines.read.connect() as conn:
            return int((await conn.execute(query)).scalar_one())

    async def append_logs(self, lines: Sequence[LogLine]) -> None:
        if lines:
            async with self._engines.write.begin() as conn:
                await results_.insert_logs(conn, lines, self._clock.now())

    async def children(
        self, run_id: str, *, status: str | None = None, limit: int = 100, after_index: int = -1
    ) -> list[RunRecord]:
        """A page of a run's children in item order."""
        query = (
            select(runs)
            .where(runs.c.parent_run_id == run_id, runs.c.item_index > after_index)
            .order_by(runs.c.item_index)
            .limit(limit)
        )
        if status is not None:
            query = query.where(runs.c.status == status)
        async with self._engines.read.connect() as conn:
            return [run_record(r._mapping) for r in (await conn.execute(query)).all()]

    async def fanout_progress(self, run_id: str) -> dict[str, int]:
        """Children of `run_id` by status plus the total, from the spawner counters and one
        grouped count of the unfinished ones (cheap enough to read every second)."""
        counts, _ = await self.fanout_with_holders(run_id)
        return counts

    async def fanout_with_holders(self, run_id: str) -> tuple[dict[str, int], list[HeldChildren]]:
        """`fanout_progress`, and its running children by the service holding their step,
        from the same read (`children.running_children`)."""
        query = select(
            steps.c.children_total,
            steps.c.children_succeeded,
            steps.c.children_failed,
            steps.c.children_cancelled,
        ).where(steps.c.run_id == run_id, steps.c.children_total.is_not(None))
        async with self._engines.read.connect() as conn:
            rows = (await conn.execute(query)).all()
            running = await fanout.running_children(conn, run_id)
        total = sum(r.children_total or 0 for r in rows)
        succeeded = sum(r.children_succeeded for r in rows)
        failed = sum(r.children_failed for r in rows)
        cancelled = sum(r.children_cancelled for r in rows)
        pending = max(0, total - succeeded - failed - cancelled - running.count)
        counts = {
            "total": total,
            "pending": pending,
            "running": running.count,
            "succeeded": succeeded,
            "failed": failed,
            "cancelled": cancelled,
        }
        return counts, running.held

    async def held_with_leases(
        self, run_id: str, worker: str, leases: LeaseRanges
    ) -> HeldChildren | None:
        """Running children of `run_id` that `worker` holds under leases ending in `leases`
        (`children.held_with_leases`)."""
        async with self._engines.read.connect() as conn:
            return await fanout.held_with_leases(conn, run_id, worker, leases)

    async def holding_a_step(self, run_ids: Sequence[str]) -> set[str]:
        """Which of `run_ids` have a step claimed by a worker right now."""
        async with self._engines.read.connect() as conn:
            return await fanout.holding_a_step(conn, run_ids)

    async def waiting_children(self, run_id: str) -> list[WaitingGroup]:
        """Children of `run_id` whose steps wait, grouped by reason (`schemas.waiting`)."""
        async with self._engines.read.connect() as conn:
            return await fanout.waiting_children(conn, run_id, self._clock.now())

    # ── pages (see `engine.store.listing`) ──────────────────────────────────────────────────

    async def runs_page(
        self, selection: listing.RunFilter, *, after: listing.RunKey | None, limit: int
    ) -> list[RunHeader]:
        """Up to `limit` runs matching `selection`, newest first, strictly after `after`."""
        async with self._engines.read.connect() as conn:
            return await listing.runs_page(conn, selection, after=after, limit=limit)

    async def run_ids_in_range(
        self, low: str, high: str | None, *, tenant: str | None = None, limit: int = 10
    ) -> list[str]:
        """Up to `limit` run ids in [`low`, `high`), in id order, of `tenant` only when given
        (a range of the primary key: how a prefix of a run id is resolved)."""
        async with self._engines.read.connect() as conn:
            return await listing.ids_in_range(
                conn, listing.runs, low, high, tenant=tenant, limit=limit
            )

    async def children_page(
        self,
        run_id: str,
        *,
        status: str | None = None,
        after: listing.ChildKey | None = None,
        limit: int = 100,
    ) -> list[RunHeader]:
        """Up to `limit` children of `run_id` in (spawner vertex, item index) order."""
        async with self._engines.read.connect() as conn:
            return await listing.children_page(
                conn, run_id, status=status, after=after, limit=limit
            )

    async def restarts_of(self, run_id: str) -> list[str]:
        """Ids of the runs started over from `run_id`, oldest first."""
        async with self._engines.read.connect() as conn:
            return await listing.restarts_of(conn, run_id)

    async def started_over_as(self, roots: Mapping[str, str]) -> dict[str, str]:
        """For each run of `roots` (run id → its root run's id, itself for a root run) whose
        root an operator started over, the id of the run that start over made (what a retry's
        409 `started_over` names, for the run or a child under it): one indexed read for a
        list's page."""
        if not roots:
            return {}
        async with self._engines.read.connect() as conn:
            found = await restarts.new_runs(conn, roots.values())
        return {run_id: str(found[root].id) for run_id, root in roots.items() if root in found}

    async def log_page(self, run_id: str, *, after: int = 0, limit: int = 200) -> list[LogRecord]:
        """Up to `limit` log lines of `run_id` with ids above `after`, in order."""
        async with self._engines.read.connect() as conn:
            rows = await listing.log_page(conn, run_id, after=after, limit=limit)
        return [log_record(r) for r in rows]

    async def step_log_lines(self, run_id: str, *, limit: int) -> list[LogRecord]:
        """The latest `limit` log lines of `run_id` written by its steps, oldest first."""
        async with self._engines.read.connect() as conn:
            rows = await listing.vertex_log_lines(conn, run_id, limit=limit)
        return [log_record(r) for r in rows]

    async def workflow_summaries(self) -> list[listing.WorkflowSummary]:
        """Every published workflow (latest version, version count, first and last publish)."""
        async with self._engines.read.connect() as conn:
            return await listing.workflow_summaries(conn)

    async def ready_steps(self, up_to: int) -> int:
        """How many steps are READY, counting no further than `up_to` (a bounded count)."""
        async with self._engines.read.connect() as conn:
            return await listing.ready_steps(conn, up_to)
