"""An `api` process through a database outage (real processes on loopback: the api reaches
PostgreSQL through a TCP proxy the test cuts, the shared server is never stopped): one warning
that says what an api does meanwhile, in the driver's words without SQLAlchemy's SQL text or
link, then one info line once the database works again."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from tests.conftest import Backend
from tests.e2e.outage_harness import proxied, until
from tests.e2e.rest_harness import process_env, schemabridge, service


async def test_an_api_tells_a_database_outage_in_its_words_and_when_it_is_over(
    pg_database_url: str, redis_url: str, tmp_path: Path
) -> None:
    env = process_env(Backend("direct", pg_database_url, redis_url), tmp_path, auth="off")
    assert schemabridge(env, "db", "upgrade").returncode == 0
    async with proxied(pg_database_url) as (proxy, through):
        api_env = process_env(Backend("proxied", through, redis_url), tmp_path, auth="off")
        args = ["api", "--port", "0", "--access-log", "off"]
        with service(args, api_env, tmp_path / "api.log") as api:
            url = await asyncio.to_thread(api.wait_for_url)
            async with httpx.AsyncClient(base_url=url, trust_env=False, timeout=30) as http:
                assert (await http.get("/workflows")).status_code == 200
                await proxy.cut()

                async def refused() -> bool:
                    answer = await http.get("/workflows")
                    return answer.status_code == 503 and " WARNING " in api.stderr()

                await until(refused, "a 503 and the outage's warning")
                await proxy.start()

                async def back() -> bool:
                    return "database works again after" in api.stderr()

                await until(back, "the api saying the database works again")
                assert (await http.get("/workflows")).status_code == 200
    log = api.stderr()
    warnings = [line for line in log.splitlines() if " WARNING " in line]
    assert len(warnings) == 1, log
    assert "database unreachable" in warnings[0], warnings[0]
    assert "answered 503" in warnings[0], warnings[0]
    assert "not yet recorded" not in warnings[0] and "leases" not in warnings[0], warnings[0]
    assert "[SQL:" not in log and "sqlalche.me" not in log, log
    assert "Traceback" not in log, log
    recovered = [line for line in log.splitlines() if "database works again" in line]
    assert len(recovered) == 1 and " INFO " in recovered[0], log
