"""The deployments role of the store: serving versions, deployments and the system runs that
drive them (docs/architecture.md, 'Versions and deployments').

A submission reads one row, `workflow_serving`, by primary key (`serving`): the serving
version, and while a deployment runs, its candidate and the candidate's weight. A deployment
is created with its `gradual_deploy` run in one transaction; the partial unique index
`uq_deployment_running` refuses a second RUNNING deployment of a workflow even when two
requests race. Stage changes and ends are compare-and-set updates (`deployment_rows`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from engine.store import audit, listing, pins
from engine.store import deployment_rows as rows_
from engine.store import results as results_
from engine.store.actions_store import ROUTED, OperatorActionsStore
from engine.store.catalogue import RunCatalogue
from engine.store.core import UnknownWorkflow, step_rows, steps
from engine.store.deployment_rows import DeploymentCounts
from engine.store.models import (
    AuditAction,
    AuditSubject,
    DeploymentStatus,
    RunRoute,
    RunStatus,
)
from engine.store.operator_actions import Action, RerunFacts, RerunGroup, action_line, chunks
from engine.store.records import (
    DeploymentRecord,
    LogLine,
    ServingRecord,
    VersionRecord,
)
from engine.store.restarts import submitted_routes
from schemas.definitions import Workflow
from schemas.errors import WrongState
from schemas.tenant_ids import SYSTEM_TENANT

logger = logging.getLogger(__name__)

PUBLISH_ATTEMPTS = 3


@dataclass(frozen=True)
class DeploymentSpec:
    """What a new deployment needs (checked by the operations layer)."""

    workflow: str
    candidate_version: int
    stages: list[dict[str, Any]]
    rollback: dict[str, Any]
    check_interval_s: float
    actor: str


def running_deployment(workflow: str, deployment_id: str | None) -> WrongState:
    """A second deployment of a workflow (or a serving switch) while one runs; its id is in
    `details.deploymentId`."""
    refusal = WrongState(
        f"workflow {workflow!r} has a deployment running ({deployment_id}); abort it or wait "
        "for it to end",
        state=DeploymentStatus.RUNNING.value,
        code="deployment_running",
    )
    refusal.details["deploymentId"] = deployment_id
    return refusal


def candidate_is_serving(workflow: str, version: int, newest: int | None = None) -> WrongState:
    """A deployment of the version that serves already; `newest`: the workflow's newest
    version, named as the one to deploy when it is newer."""
    then = (
        f"deploy its newest, v{newest} (`schemabridge deployments start {workflow} "
        f"--version {newest}`)"
        if newest is not None and newest > version
        else "publish a new version and deploy that"
    )
    return WrongState(
        f"{workflow} v{version} is already the serving version; {then}",
        state="serving",
        code="candidate_is_serving",
    )


@dataclass(frozen=True)
class SpawningParent:
    """A workflow whose serving version starts another as a SPAWNER's child."""

    name: str
    version: int
    """Its serving version."""
    references: list[int | None]
    """The child version each of its spawners names (None: unversioned, pinned at the root
    to the child's serving version)."""


class DeploymentStore(RunCatalogue, OperatorActionsStore):
    """Serving versions and deployments (on the catalogue's versions and the operator
    actions' cancel)."""

    # ── serving versions ────────────────────────────────────────────────────────────────────

    async def serving(self, name: str) -> ServingRecord | None:
        """The routing row of `name` (one primary-key read); None if never published."""
        async with self._engines.read.connect() as conn:
            return await rows_.serving_row(conn, name)

    async def serving_version(self, name: str) -> VersionRecord:
        """The version of `name` new runs get outside any candidate's share (the latest when
        the workflow has no serving row). Unknown: `UnknownWorkflow`."""
        record = await self.serving(name)
        return await self.get_version(name, None if record is None else record.serving_version)

    async def set_serving(
        self, name: str, version: int, *, actor: str
    ) -> tuple[ServingRecord, bool]:
        """Make `version` the serving version of `name` at once, and whether that changed
        anything: a `version` that serves already is left as it is (False: the row keeps who
        set it and since when, and no audit event is written). Refused while a deployment of
        `name` runs (`WrongState(code="deployment_running")`); unknown: `UnknownWorkflow`."""
        await self.get_version(name, version)
        now = self._clock.now()
        async with self._engines.write.begin() as conn:
            current = await rows_.serving_row(conn, name)
            if current is not None and current.deployment_id is not None:
                raise running_deployment(name, current.deployment_id)
            if current is not None and current.serving_version == version:
                return current, False
            values = {"serving_version": version, "updated_at": now, "updated_by": actor}
            if current is None:
                await conn.execute(insert(rows_.serving).values(name=name, **values))
                wrote = True
            else:
                # Not where it serves already: two identical switches at once on PostgreSQL
                # both read the old version, and the second, let through once the first
                # commits, would write (and audit) a change that was not one.
                changed = await conn.execute(
                    update(rows_.serving)
                    .where(
                        rows_.serving.c.name == name,
                        rows_.serving.c.deployment_id.is_(None),
                        rows_.serving.c.serving_version != version,
                    )
                    .values(**values)
                )
                wrote = changed.rowcount == 1
            record = await rows_.serving_row(conn, name)
            if not wrote and record is not None and record.deployment_id is None:
                return record, False  # a switch to `version` committed first
            if wrote and record is not None and record.serving_version == version:
                await audit.append(
                    conn,
                    at=now,
                    actor=actor,
                    action=AuditAction.SERVING_SET,
                    subject=AuditSubject.WORKFLOW,
                    subject_id=name,
                    detail={
                        "version": version,
                        "was": None if current is None else current.serving_version,
                    },
                )
        if record is None or record.serving_version != version:
            raise running_deployment(name, None if record is None else record.deployment_id)
        logger.info(
            "serving version of %s set to v%d by %s (was v%s)",
            name,
            version,
            actor,
            None if current is None else current.serving_version,
        )
        return record, True

    async def spawning_parents(self, name: str) -> list[SpawningParent]:
        """The other workflows whose serving version has a SPAWNER of `name`, by name: their
        runs pin `name`'s version at the root, so a deployment of `name` never routes them.
        Reads every workflow's serving version and walks each one's definition (cached once
        read): a few ms at 1,000 workflows (bench/results-deploy.md), so a caller that asks
        often keeps the answer while no routing row changes (it depends on nothing else)."""
        async with self._engines.read.connect() as conn:
            serving_now = await rows_.serving_versions(conn)
        found = []
        for parent, version in sorted(serving_now.items()):
            if parent == name:
                continue
            try:
                workflow = (await self.get_version(parent, version)).workflow
            except UnknownWorkflow:
                continue
            pinned = {ref for child, ref in pins.spawned(workflow) if child == name}
            if pinned:
                found.append(SpawningParent(parent, version, sorted(pinned, key=lambda v: v or 0)))
        return found

    async def rerun_facts(self, run_id: str) -> RerunFacts | None:
        """The version run `run_id` runs again when retried or started over, with the
        workflow's routing row and the latest deployment that rolled that version back (a
        few small reads, for an operator's action or its preview). None: no such run."""
        columns = (
            results_.runs.c.workflow_name,
            results_.runs.c.workflow_version,
            results_.runs.c.route,
            results_.runs.c.restarted_from,
            results_.runs.c.parent_run_id,
            results_.runs.c.tenant_id,
        )
        async with self._engines.read.connect() as conn:
            query = select(*columns).where(results_.runs.c.id == run_id)
            run = (await conn.execute(query)).first()
            if run is None:
                return None
            return await rows_.rerun_facts_of(conn, run)

    async def run_versions(
        self, run_ids: Sequence[str], *, tenant: str | None = None
    ) -> dict[str, RerunGroup]:
        """The workflow version of each of `run_ids` known (within `tenant` when set), as
        a batch retry's rolled-back warning needs it (`group_reruns` makes a batch's groups
        of them): one read of seven small columns per chunk of ids, and for start overs, the
        routes of the runs they repeat (`restarts.original_routes`: a start over of a routed
        run is routed too)."""
        runs = results_.runs
        columns = (
            runs.c.id,
            runs.c.workflow_name,
            runs.c.workflow_version,
            runs.c.route,
            runs.c.restarted_from,
            runs.c.parent_run_id,
            runs.c.tenant_id,
        )
        rows: list[Any] = []
        async with self._engines.read.connect() as conn:
            for chunk in chunks(list(run_ids)):
                query = select(*columns).where(runs.c.id.in_(chunk))
                if tenant is not None:
                    query = query.where(runs.c.tenant_id == tenant)
                rows += (await conn.execute(query)).all()
            routes = await submitted_routes(conn, rows)
        return {
            row.id: RerunGroup(
                row.workflow_name,
                row.workflow_version,
                route in ROUTED,
                row.parent_run_id,
                row.tenant_id,
            )
            for row, route in zip(rows, routes, strict=True)
        }

    async def rerun_facts_of(self, groups: Sequence[RerunGroup]) -> list[RerunFacts]:
        """`rerun_facts` of each workflow version of a batch (`groups`, one per version):
        its routing row and the latest deployment that rolled it back, two small reads per
        version, the routing row once per workflow."""
        found = []
        async with self._engines.read.connect() as conn:
            serving: dict[str, ServingRecord | None] = {}
            for group in groups:
                name, version = group.workflow, group.version
                if name not in serving:
                    serving[name] = await rows_.serving_row(conn, name)
                found.append(
                    RerunFacts(
                        workflow=name,
                        version=version,
                        route=RunRoute.SERVING.value if group.routed else None,
                        parent_run_id=group.parent_run_id,
                        serving=serving[name],
                        rolled_back=await rows_.latest_rolled_back(conn, name, version),
                        tenant_id=group.tenant_id,
                    )
                )
        return found

    async def latest_rolled_back(self, name: str, version: int) -> DeploymentRecord | None:
        """The latest deployment that rolled `name` v`version` back, if any."""
        async with self._engines.read.connect() as conn:
            return await rows_.latest_rolled_back(conn, name, version)

    async def recent_inputs(self, name: str, version: int, *, limit: int) -> list[Any]:
        """The inputs of the latest `limit` root runs of `name` v`version` (accepted by it)."""
        async with self._engines.read.connect() as conn:
            return await rows_.recent_root_inputs(conn, name, version, limit=limit)

    # ── deployments ─────────────────────────────────────────────────────────────────────────

    async def start_deployment(self, spec: DeploymentSpec, system: Workflow) -> DeploymentRecord:
        """Create a RUNNING deployment in its first stage and the `gradual_deploy` run (of
        `system`'s stored version, stored by content if new) that drives it, in one
        transaction: from its commit the candidate gets the first stage's weight. Refusals
        (nothing written, not even a new version of `system`): another deployment of the
        workflow running `WrongState(code="deployment_running")`; the candidate is already
        serving `WrongState(code="candidate_is_serving")`; unknown workflow or candidate
        `UnknownWorkflow`."""
        await self.get_version(spec.workflow, spec.candidate_version)
        for attempt in range(PUBLISH_ATTEMPTS):
            try:
                row, version = await self._start_once(spec, system)
            except IntegrityError as exc:
                # Another deployment of the workflow committed first (the partial unique
                # index), or another start stored this shape of `system` first (its version
                # number): the next attempt reads what that one wrote.
                if attempt < PUBLISH_ATTEMPTS - 1:
                    continue
                found = await self.serving(spec.workflow)
                raise running_deployment(
                    spec.workflow, None if found is None else found.deployment_id
                ) from exc
            self._versions[(version.name, version.version)] = version  # committed: immutable
            await self._grew(1 + len(system.vertices))
            return rows_.deployment_record(row)
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _start_once(
        self, spec: DeploymentSpec, system: Workflow
    ) -> tuple[dict[str, Any], VersionRecord]:
        """One transaction of `start_deployment`: the deployment's row and its system
        version."""
        deployment_id = str(uuid.uuid4())
        run_id = str(uuid.uuid4())
        now = self._clock.now()
        first_weight = float(spec.stages[0]["weight"])
        async with self._engines.write.begin() as conn:
            current = await rows_.serving_row(conn, spec.workflow)
            if current is None:
                raise UnknownWorkflow(f"no published workflow {spec.workflow}")
            if current.deployment_id is not None:
                raise running_deployment(spec.workflow, current.deployment_id)
            if current.serving_version == spec.candidate_version:
                raise candidate_is_serving(spec.workflow, spec.candidate_version)
            row = {
                "id": deployment_id,
                "workflow_name": spec.workflow,
                "serving_version": current.serving_version,
                "candidate_version": spec.candidate_version,
                "status": DeploymentStatus.RUNNING.value,
                "stages": spec.stages,
                "rollback": spec.rollback,
                "check_interval_s": spec.check_interval_s,
                "stage_index": 0,
                "stage_started_at": now,
                "run_id": run_id,
                "created_at": now,
                "created_by": spec.actor,
                "ended_at": None,
                "outcome": None,
                "timeline": [{"at": now, "event": "started", "stage": 1, "weight": first_weight}],
            }
            await conn.execute(insert(rows_.deployments).values(**row))
            claimed = await conn.execute(
                update(rows_.serving)
                .where(
                    rows_.serving.c.name == spec.workflow,
                    rows_.serving.c.deployment_id.is_(None),
                )
                .values(
                    candidate_version=spec.candidate_version,
                    candidate_weight=first_weight,
                    deployment_id=deployment_id,
                )
            )
            if claimed.rowcount != 1:
                raise running_deployment(spec.workflow, None)
            # Stored here, after every refusal and in this transaction: a refused start
            # leaves no new version of the system workflow behind.
            version, _ = await self._publish_one(conn, system, by_content=True)
            await self._insert_system_run(
                conn,
                version,
                spec,
                run_id=run_id,
                deployment_id=deployment_id,
                serving_version=current.serving_version,
                now=now,
            )
        return row, version

    async def _insert_system_run(
        self,
        conn: AsyncConnection,
        system: VersionRecord,
        spec: DeploymentSpec,
        *,
        run_id: str,
        deployment_id: str,
        serving_version: int,
        now: float,
    ) -> None:
        run_input = {
            "deploymentId": deployment_id,
            "workflow": spec.workflow,
            "candidateVersion": spec.candidate_version,
        }
        await conn.execute(
            insert(results_.runs).values(
                id=run_id,
                workflow_name=system.name,
                workflow_version=system.version,
                definition_hash=system.definition_hash,
                tenant_id=SYSTEM_TENANT,
                status=RunStatus.RUNNING.value,
                timeout_tier="process",
                input=run_input,
                steps_remaining=len(system.workflow.vertices),
                created_at=now,
                started_at=now,
                root_run_id=run_id,
                pinned_versions={},
                route=RunRoute.SYSTEM.value,
                created_by=spec.actor,
            )
        )
        await conn.execute(insert(steps), step_rows(run_id, SYSTEM_TENANT, system.workflow, now))
        # The workflow being deployed first: "gradual_deploy v3" beside "tickets v4" read
        # as if v3 were a version of the deployed workflow.
        stages = len(system.workflow.vertices)
        message = (
            f"run created: deployment {deployment_id} of {spec.workflow} "
            f"v{spec.candidate_version} (over the serving v{serving_version}), started by "
            f"{spec.actor}; this run ({system.name} v{system.version}, the engine's own "
            f"workflow) drives its {stages} stage{'s' if stages != 1 else ''}"
        )
        line = LogLine(run_id, "info", message, data={"actor": spec.actor})
        await results_.insert_logs(conn, [line], now)

    async def deployment(self, deployment_id: str) -> DeploymentRecord | None:
        async with self._engines.read.connect() as conn:
            return await rows_.deployment_row(conn, deployment_id)

    async def candidate_deployment(
        self, workflow: str, version: int, created_at: float
    ) -> str | None:
        """The deployment that routed a run of `workflow` v`version` created at `created_at`
        to its candidate (a run whose route is `candidate`): the latest deployment of the
        workflow begun no later than the run, if `version` is its candidate (one runs at a
        time, and a candidate's window ends where the next deployment begins). One read of
        `ix_deployment_workflow_created`; None when no deployment fits."""
        table = rows_.deployments
        query = (
            select(table.c.id, table.c.candidate_version)
            .where(table.c.workflow_name == workflow, table.c.created_at <= created_at)
            .order_by(table.c.created_at.desc(), table.c.id.desc())
            .limit(1)
        )
        async with self._engines.read.connect() as conn:
            row = (await conn.execute(query)).first()
        return None if row is None or row.candidate_version != version else str(row.id)

    async def deployment_ids_in_range(
        self, low: str, high: str | None, *, limit: int = 10
    ) -> list[str]:
        """Up to `limit` deployment ids in [`low`, `high`), in id order (a range of the primary
        key: how a prefix of a deployment's id is resolved)."""
        async with self._engines.read.connect() as conn:
            return await listing.ids_in_range(conn, rows_.deployments, low, high, limit=limit)

    async def deployments_of(
        self, workflow: str | None, *, limit: int, before: tuple[float, str] | None = None
    ) -> list[DeploymentRecord]:
        """The deployments of `workflow` (None: of every workflow), newest first; with
        `before` (a deployment's `created_at` and id), those after it in that order."""
        table = rows_.deployments
        query = select(table)
        if workflow is not None:
            query = query.where(table.c.workflow_name == workflow)
        if before is not None:
            created_at, deployment_id = before
            query = query.where(
                or_(
                    table.c.created_at < created_at,
                    and_(table.c.created_at == created_at, table.c.id < deployment_id),
                )
            )
        query = query.order_by(table.c.created_at.desc(), table.c.id.desc()).limit(limit)
        async with self._engines.read.connect() as conn:
            return [rows_.deployment_record(r._mapping) for r in (await conn.execute(query)).all()]

    async def deployments_by_status(self) -> dict[str, int]:
        """How many deployments are in each status (the table holds one row per deployment
        ever started: small)."""
        query = select(rows_.deployments.c.status, func.count()).group_by(
            rows_.deployments.c.status
        )
        async with self._engines.read.connect() as conn:
            return {status: int(n) for status, n in (await conn.execute(query)).all()}

    async def running_deployments(self) -> list[DeploymentRecord]:
        query = select(rows_.deployments).where(
            rows_.deployments.c.status == DeploymentStatus.RUNNING.value
        )
        async with self._engines.read.connect() as conn:
            return [rows_.deployment_record(r._mapping) for r in (await conn.execute(query)).all()]

    async def deployment_counts(
        self, record: DeploymentRecord, *, recent: int | None = None
    ) -> DeploymentCounts:
        """The runs `record` routed, by version and outcome (see `DeploymentCounts`): every
        one (a read as long as the window), or with `recent` each version's `recent` latest
        (the candidate's at least as many as its stage's minimum runs): a bounded read."""
        async with self._engines.read.connect() as conn:
            return await rows_.window_counts(conn, record, recent)

    async def count_refusal(self, deployment_id: str) -> bool:
        """Count a submission the candidate of RUNNING deployment `deployment_id` refused
        (its inputSchema): a failed run of the candidate in the deployment's figures. One
        UPDATE, only in a refusal's path; False when the deployment had ended."""
        async with self._engines.write.begin() as conn:
            return await rows_.count_refusal(conn, deployment_id)

    async def enter_stage(
        self, record: DeploymentRecord, to_index: int, event: dict[str, Any]
    ) -> bool:
        """Move `record` (as read) to stage `to_index`, its clock starting now; False when the
        deployment changed meanwhile."""
        async with self._engines.write.begin() as conn:
            return await rows_.set_stage(conn, record, to_index, self._clock.now(), event)

    async def end_deployment(
        self, record: DeploymentRecord, status: DeploymentStatus, outcome: dict[str, Any]
    ) -> bool:
        """A stage's verdict: end `record` with `status` if it is still RUNNING in the stage it
        was read in; False otherwise (nothing written)."""
        async with self._engines.write.begin() as conn:
            return await rows_.end(
                conn, record, status, self._clock.now(), outcome, same_stage=True
            )

    async def stop_deployment(
        self,
        deployment_id: str,
        status: DeploymentStatus,
        *,
        actor: str,
        reason: str | None = None,
    ) -> tuple[DeploymentRecord | None, bool]:
        """An operator's abort (ABORTED) or rollback (ROLLED_BACK), with the operator's own
        `reason` if any: the candidate's weight drops to 0 and the `gradual_deploy` run is
        cancelled, in one transaction. Returns the deployment as it is afterwards (None:
        unknown) and whether this call ended it (False: it had already ended)."""

        async def work(conn: AsyncConnection) -> tuple[DeploymentRecord | None, bool]:
            now = self._clock.now()
            record = await rows_.deployment_row(conn, deployment_id, for_update=True)
            if record is None or record.status != DeploymentStatus.RUNNING.value:
                return record, False
            verb = "aborted" if status is DeploymentStatus.ABORTED else "rolled back"
            # Not "aborted by …": every reader puts the verb before the reason already.
            why = f"stopped by {actor}" + (f": {reason}" if reason else "")
            outcome = {
                "reason": why,
                "actor": actor,
                "stage": record.stage_index + 1,
                "figures": await self._window_figures(conn, record),
            }
            if not await rows_.end(conn, record, status, now, outcome, same_stage=False):
                return await rows_.deployment_row(conn, deployment_id), False
            said = f"deployment {verb} by {actor}" + (f": {reason}" if reason else "")
            await self._cancel_system_run(conn, record, actor, said)
            return await rows_.deployment_row(conn, deployment_id), True

        return await self._transaction(work)

    async def _cancel_system_run(
        self, conn: AsyncConnection, record: DeploymentRecord, actor: str, message: str
    ) -> None:
        now = self._clock.now()
        await self._cancel_tree(conn, record.run_id, now)
        line = action_line(record.run_id, Action.CANCEL, actor, message)
        await results_.insert_logs(conn, [line], now)

    async def _window_figures(
        self, conn: AsyncConnection, record: DeploymentRecord
    ) -> dict[str, Any]:
        return await rows_.window_figures(conn, record)

    async def _after_cancel(
        self, conn: AsyncConnection, run_id: str, actor: str
    ) -> DeploymentRecord | None:
        """Cancelling a deployment's `gradual_deploy` run aborts the deployment with it:
        nothing would drive it any more, and a candidate must never keep a weight alone."""
        record = await rows_.running_driven_by(conn, run_id)
        if record is None:
            return None
        aborted = await rows_.abort_stopped(
            conn,
            record,
            self._clock.now(),
            reason=f"its run {record.run_id} (gradual_deploy) was cancelled by {actor}",
            actor=actor,
            figures=await self._window_figures(conn, record),
        )
        return record if aborted else None


def stage_event(stage_index: int, weight: float, now: float, **extra: Any) -> dict[str, Any]:
    return {"at": now, "event": "stage", "stage": stage_index + 1, "weight": weight, **extra}


__all__: Sequence[str] = [
    "SYSTEM_TENANT",
    "DeploymentCounts",
    "DeploymentSpec",
    "DeploymentStore",
    "RerunFacts",
]
