"""What a worker's flush pays to find its live claims, against the RUNNING steps of a cluster.

    python -m bench.live_claims                       # RUNNING 0, 1,000, 4,000, 16,000
    bench/interleave.sh REF 3 out.jsonl -- -m bench.live_claims   # against commit REF

Every flush first locks the steps whose claims its results hold (`engine.store.results.
live_claims`: one `SELECT … FOR UPDATE`); a renewal and a give-back do the same. Many workers
hold many claims at once (64 in flight each by default), so what that lookup costs as the
number of RUNNING steps grows is what a cluster pays per flush as it adds workers.

On a fresh PostgreSQL database (127.0.0.1, migrated, dropped at the end; Redis unused) each
case fills the step table with `--rows` finished steps and `--running` RUNNING ones (claimed
by other workers: tokens `other:<id>`), runs ANALYZE, then times `--lookups` executions of
the engine's live-claims statement for `--claims` RUNNING steps (their real ids and tokens),
each in a transaction rolled back. Prints one JSON line per case: the median and p90 of the
statement's round trip in ms, and the plan's first index.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import text

from bench.claims import fresh_database
from engine.store import db, results

FILL = text(
    "INSERT INTO step (run_id, vertex_id, tenant_id, status, deps_pending, attempts,"
    " auto_retries, created_at, not_before, claim_token, lease_expires_at)"
    " SELECT 'r' || g, 'a', 't', CASE WHEN g <= :running THEN 'RUNNING' ELSE 'SUCCEEDED' END,"
    " 0, 1, 0, g, g, NULL, 1e12 FROM generate_series(1, :total) AS g"
)
TOKENS = text("UPDATE step SET claim_token = 'other:' || id WHERE status = 'RUNNING'")


async def measure(running: int, args: argparse.Namespace) -> dict[str, Any]:
    async with fresh_database("sb_live_claims") as database:
        engines = db.create_engines(database.url)
        try:
            await db.upgrade(engines)
            async with engines.write.begin() as conn:
                await conn.execute(FILL, {"running": running, "total": args.rows + running})
                await conn.execute(TOKENS)
                await conn.execute(text("ANALYZE step"))
                rows = await conn.execute(
                    text("SELECT id, claim_token FROM step WHERE status = 'RUNNING' LIMIT :n"),
                    {"n": args.claims},
                )
                mine = rows.all()
            params = {"b_ids": [r.id for r in mine], "b_tokens": [r.claim_token for r in mine]}
            statement = engines.dialect.statement(results._live_claims)
            times = []
            async with engines.write.connect() as conn:
                for _ in range(args.lookups):
                    began = time.perf_counter()
                    async with conn.begin() as transaction:
                        found = (await conn.execute(statement, params)).all()
                        await transaction.rollback()
                    times.append((time.perf_counter() - began) * 1000)
                    if len(found) != len(mine):
                        raise SystemExit(f"found {len(found)} of {len(mine)} live claims")
                compiled = statement.compile(dialect=conn.dialect)
                bound = compiled.construct_params(params)
                plan = (
                    await conn.exec_driver_sql(
                        f"EXPLAIN {compiled}", tuple(bound[n] for n in compiled.positiontup)
                    )
                ).all()
        finally:
            await engines.dispose()
    index = next((line[0] for line in plan if " using " in line[0]), "no index")
    times.sort()
    return {
        "running": running,
        "finished": args.rows,
        "claims_looked_up": len(mine),
        "lookups": len(times),
        "median_ms": round(statistics.median(times), 3),
        "p90_ms": round(times[int(len(times) * 0.9)], 3),
        "plan": index.strip().split(" on ")[0].replace("->  ", ""),
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--running",
        type=lambda v: [int(x) for x in v.split(",")],
        default=[0, 1_000, 4_000, 16_000],
        help="RUNNING steps per case, comma-separated",
    )
    parser.add_argument("--rows", type=int, default=100_000, help="finished steps per case")
    parser.add_argument("--claims", type=int, default=16, help="claims one flush looks up")
    parser.add_argument("--lookups", type=int, default=300, help="timed lookups per case")
    return parser.parse_args(argv)


async def amain(args: argparse.Namespace) -> None:
    for running in args.running:
        print(json.dumps(await measure(max(running, args.claims), args)), flush=True)


def main(argv: Sequence[str] | None = None) -> None:
    asyncio.run(amain(parse_args(argv)))


if __name__ == "__main__":
    main()
