"""SchemaBridge behind PgBouncer in transaction mode (docs/scaling.md), with real processes:
the schema migrated on PostgreSQL directly, then `schemabridge api` and a worker through a
throwaway PgBouncer. With `SCHEMABRIDGE_DATABASE_POOLER=transaction` a fan-out completes with
each child called once and no prepared statement left on PgBouncer's server connections;
without it, the processes say in one line what to set (exit 2 at start, /health not ok while
statements fail that way) instead of reporting the database unreachable."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import asyncpg
import httpx

from engine.store.pooler import POOLER_HINT
from tests.conftest import Backend
from tests.e2e.outage_harness import fan_out, until
from tests.e2e.pgbouncer_harness import pgbouncer, through
from tests.e2e.rest_harness import process_env, schemabridge, service

CHILDREN = 300
SERVER_CONNECTIONS = 3
"""Fewer than the processes' pooled connections: every server connection serves several
clients' transactions in turn, as in production."""


def _plain(database_url: str) -> str:
    return database_url.replace("postgresql+asyncpg://", "postgresql://")


async def _prepared_on_servers(port: int, name: str) -> list[int]:
    """How many prepared statements each of PgBouncer's server connections holds: one client
    per server connection, each inside a transaction so that none hands its server back."""
    dsn = f"postgresql://postgres@127.0.0.1:{port}/{name}"
    clients = [
        await asyncpg.connect(dsn, statement_cache_size=0) for _ in range(SERVER_CONNECTIONS)
    ]
    try:
        counts = []
        for client in clients:
            await client.execute("BEGIN")
            counts.append(await client.fetchval("SELECT count(*) FROM pg_prepared_statements"))
        return counts
    finally:
        for client in clients:
            await client.close()


async def test_a_fan_out_runs_through_pgbouncer_in_transaction_mode(
    pg_database_url: str, redis_url: str, tmp_path: Path
) -> None:
    name = pg_database_url.rsplit("/", 1)[1]
    direct = process_env(Backend("direct", pg_database_url, redis_url), tmp_path, auth="off")
    migrated = schemabridge(direct, "db", "upgrade")
    assert migrated.returncode == 0, migrated.stderr
    with pgbouncer(SERVER_CONNECTIONS) as port:
        pooled = Backend("pgbouncer", through(pg_database_url, port), redis_url)
        env = process_env(pooled, tmp_path, auth="off", database_pooler="transaction")
        downstream_program = [sys.executable, "-m", "demo.downstream"]
        with (
            service(["--port", "0"], env, tmp_path / "downstream.log", downstream_program) as mock,
            service(["api", "--port", "0"], env, tmp_path / "api.log") as api,
            service(["worker", "--name", "bounced"], env, tmp_path / "worker.log") as worker,
        ):
            base = await asyncio.to_thread(mock.wait_for_url)
            url = await asyncio.to_thread(api.wait_for_url)
            async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=30) as http:
                for document in fan_out(base):
                    published = await http.post("/workflows", json=document)
                    assert published.status_code in (200, 201), published.text
                items = list(range(CHILDREN))
                answer = await http.post("/workflows/fan/runs", json={"input": {"items": items}})
                assert answer.status_code == 201, answer.text
                run_id = answer.json()["id"]

                async def ended() -> str | None:
                    run = await http.get(f"/runs/{run_id}")
                    assert run.status_code == 200, run.text  # never a 503 from the database
                    status = run.json()["status"]
                    return None if status == "RUNNING" else str(status)

                assert await until(ended, "the fan-out ending", timeout_s=240) == "SUCCEEDED"
                assert (await http.get("/health")).json() == {"status": "ok"}
            async with httpx.AsyncClient(base_url=base, trust_env=False) as http:
                stats = (await http.get("/_stats")).json()
            leaked = await _prepared_on_servers(port, name)
            api.stop()
            worker.stop()
    assert stats["total"] == CHILDREN, stats  # each child called once
    conn = await asyncpg.connect(_plain(pg_database_url))
    try:
        children = await conn.fetch(
            "SELECT status, count(*) FROM run WHERE parent_run_id = $1 GROUP BY status", run_id
        )
        retried = await conn.fetchval(
            "SELECT count(*) FROM step JOIN run ON run.id = step.run_id "
            "WHERE run.parent_run_id = $1 AND step.attempts <> 1",
            run_id,
        )
    finally:
        await conn.close()
    assert {row["status"]: row["count"] for row in children} == {"SUCCEEDED": CHILDREN}
    assert retried == 0
    # Unnamed statements only: nothing is left on a server connection for another client.
    assert leaked == [0] * SERVER_CONNECTIONS
    for log in (api.stderr(), worker.stderr()):
        assert "prepared statement" not in log and "Traceback" not in log, log
        assert "unreachable" not in log, log


async def _leave_a_statement_on_the_server(port: int, name: str) -> None:
    """What other asyncpg clients do through the same PgBouncer: their statements are
    prepared as `__asyncpg_stmt_1__`, `__asyncpg_stmt_2__`, … and stay on the server
    connection. The first 256 names are left there (by a simple query, so this client's own
    statements leave nothing), whichever of them the process under test prepares first."""
    client = await asyncpg.connect(
        f"postgresql://postgres@127.0.0.1:{port}/{name}", statement_cache_size=0
    )
    try:
        names = (f"__asyncpg_stmt_{i:x}__" for i in range(1, LEFT_STATEMENTS + 1))
        # The server connection may hold them from a former call (PgBouncer keeps it), or
        # not (it closes one whose client left mid-transaction): the same either way.
        await client.execute(
            ";".join(["DEALLOCATE ALL", *(f"PREPARE {n} AS SELECT 1" for n in names)])
        )
    finally:
        await client.close()


LEFT_STATEMENTS = 256
"""Statement names another client leaves on the one server connection."""


async def test_without_the_setting_api_and_worker_refuse_to_start_naming_it(
    pg_database_url: str, redis_url: str, tmp_path: Path
) -> None:
    """One server connection, already holding another client's `__asyncpg_stmt_1__`."""
    name = pg_database_url.rsplit("/", 1)[1]
    direct = process_env(Backend("direct", pg_database_url, redis_url), tmp_path)
    assert schemabridge(direct, "db", "upgrade").returncode == 0
    with pgbouncer(1) as port:
        env = process_env(Backend("pgbouncer", through(pg_database_url, port), redis_url), tmp_path)
        for command in (["api", "--port", "0"], ["worker"]):
            # Again for each: PgBouncer closes a server connection its client left mid-way.
            await _leave_a_statement_on_the_server(port, name)
            result = await asyncio.to_thread(schemabridge, env, *command)
            assert result.returncode == 2, (command, result.stderr)
            lines = [line for line in result.stderr.splitlines() if line.strip()]
            assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
            assert POOLER_HINT in lines[0] and "prepared statement" in lines[0], lines[0]


async def test_without_the_setting_health_fails_while_statements_fail_that_way(
    pg_database_url: str, redis_url: str, tmp_path: Path
) -> None:
    """An api started while the server connection was clean; then the statements it keeps
    prepared vanish from it (as when PgBouncer gives the api another server connection), and
    /health says the database fails while its statements do."""
    name = pg_database_url.rsplit("/", 1)[1]
    direct = process_env(Backend("direct", pg_database_url, redis_url), tmp_path, auth="off")
    assert schemabridge(direct, "db", "upgrade").returncode == 0
    with pgbouncer(1) as port:
        env = process_env(Backend("pgbouncer", through(pg_database_url, port), redis_url), tmp_path)
        with service(["api", "--port", "0"], env, tmp_path / "api.log") as api:
            url = await asyncio.to_thread(api.wait_for_url)
            async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=30) as http:
                for _ in range(5):  # every pooled connection has prepared the probe
                    assert (await http.get("/health")).json() == {"status": "ok"}
                client = await asyncpg.connect(f"postgresql://postgres@127.0.0.1:{port}/{name}")
                try:
                    await client.execute("DEALLOCATE ALL")  # on the one server connection
                finally:
                    await client.close()

                async def failing() -> dict[str, object] | None:
                    answer = await http.get("/health")
                    return answer.json() if answer.status_code != 200 else None

                report = await until(failing, "/health failing")
                assert report == {"status": "unavailable", "failing": ["database"]}, report
                # Not only the failing probe: the next ones too, while the failure is recent.
                assert (await http.get("/health")).status_code == 503
            api.stop()
    log = api.stderr()
    assert POOLER_HINT in log, log
    assert "database unreachable" not in log and "Traceback" not in log, log
