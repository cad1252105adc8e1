"""What a scraper reads through a database outage (real `api` and `worker` processes on
loopback, PostgreSQL behind a TCP proxy the test cuts, the shared server never stopped):
`/metrics` of both and `/services` keep answering the admin key they already knew, and the
api's `schemabridge_dependency_up{dependency="database"}` says 0. They answered 503 from 5 s
into the outage (the key's row is read again then, from the database), so every process read
as down to Prometheus and the outage never as such. A key no process has seen is still
refused: nothing is let in that the database did not say."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from engine.operations.keys import KEY_CACHE_MAX_AGE_S
from tests.conftest import Backend
from tests.e2e.outage_harness import proxied
from tests.e2e.rest_harness import process_env, schemabridge, service

DATABASE_UP = 'schemabridge_dependency_up{dependency="database"}'


async def test_metrics_and_services_answer_through_a_database_outage(
    pg_database_url: str, redis_url: str, tmp_path: Path
) -> None:
    env = process_env(Backend("direct", pg_database_url, redis_url), tmp_path)
    assert schemabridge(env, "db", "upgrade").returncode == 0
    made = schemabridge(env, "keys", "create", "--admin", "--name", "prometheus")
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    other = schemabridge(env, "keys", "create", "--admin", "--name", "unseen").stdout.strip()
    auth = {"Authorization": f"Bearer {key}"}
    async with proxied(pg_database_url) as (proxy, through):
        proxied_env = process_env(Backend("proxied", through, redis_url), tmp_path)
        api_args = ["api", "--port", "0", "--access-log", "off"]
        worker_args = ["worker", "--name", "w-outage", "--health-port", "0"]
        with (
            service(api_args, proxied_env, tmp_path / "api.log") as api,
            service(worker_args, proxied_env, tmp_path / "worker.log") as worker,
        ):
            api_url = await asyncio.to_thread(api.wait_for_url)
            worker_url = await asyncio.to_thread(worker.wait_for_url)
            async with httpx.AsyncClient(trust_env=False, timeout=30) as http:
                for url in (f"{api_url}/metrics", f"{worker_url}/metrics", f"{api_url}/services"):
                    assert (await http.get(url, headers=auth)).status_code == 200, url
                await proxy.cut()
                await asyncio.sleep(KEY_CACHE_MAX_AGE_S + 1.0)  # past the kept copy's age
                scraped = await http.get(f"{api_url}/metrics", headers=auth)
                assert scraped.status_code == 200, scraped.text
                assert f"{DATABASE_UP} 0.0" in scraped.text
                worker_scrape = await http.get(f"{worker_url}/metrics", headers=auth)
                assert worker_scrape.status_code == 200, worker_scrape.text
                services = await http.get(f"{api_url}/services", headers=auth)
                assert services.status_code == 200, services.text
                unseen = await http.get(
                    f"{api_url}/metrics", headers={"Authorization": f"Bearer {other}"}
                )
                assert unseen.status_code == 503, unseen.text
                await proxy.start()
