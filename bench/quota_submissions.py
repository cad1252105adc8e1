"""Submissions of one tenant with a run quota, at the store: what its quota row allows.

    python -m bench.quota_submissions                      # 16 concurrent, 5 s, 3 rounds
    bench/interleave.sh REF 3 out.jsonl -- -m bench.quota_submissions --rounds 1

Each submission of a tenant with a quota takes a unit of it by updating the tenant's one
quota row (`engine.store.catalogue.CREATE_RUN_AT_ONCE`), so concurrent submissions of one
tenant meet on that row; this measures how many runs a second get through it, with nothing
else in the way (no api process, no worker, no Redis): `--concurrency` tasks call
`Store.create_run(…, count_in_quota=True)` back to back for `--seconds`, on a fresh
PostgreSQL database (127.0.0.1, migrated by `Store.open`, dropped at the end), one
GATEWAY workflow, one tenant — with a quota of 10^8 runs (`quota`) and without one
(`no quota`), alternately, `--rounds` times. Prints one JSON line per measurement.

`--commit-delay-us N` sets PostgreSQL's `commit_delay` on the benchmark's database (`ALTER
DATABASE`, superuser): while at least `commit_siblings` (5) other transactions are active, a
commit waits N µs before it flushes the WAL (to gather others into the flush). A stand-in for
a disk whose flushes are slow (a network disk takes milliseconds): the disk here flushes in
0.5 to 60 ms depending on the minute, so without it the figures move with the disk.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Sequence

import asyncpg

from bench.claims import fresh_database
from engine.store import Store
from schemas.clock import SystemClock
from schemas.definitions import Workflow

WORKFLOW = Workflow.model_validate(
    {
        "name": "quota-bench",
        "vertices": {"call": {"type": "GATEWAY", "config": {"url": "http://127.0.0.1:9/x"}}},
    }
)
TENANT = "busy-tenant"


async def measure(quota: bool, args: argparse.Namespace) -> dict[str, object]:
    async with fresh_database("sb_quota_bench") as database:
        if args.commit_delay_us:
            admin = await asyncpg.connect(database.dsn)
            try:
                delay = int(args.commit_delay_us)
                await admin.execute(f'ALTER DATABASE "{database.name}" SET commit_delay = {delay}')
            finally:
                await admin.close()
        store = await Store.open(database.url, SystemClock())
        try:
            version = await store.publish(WORKFLOW)
            if quota:
                await store.set_quota(TENANT, 10**8)
            created = 0
            deadline = time.perf_counter() + args.seconds

            async def submit() -> None:
                nonlocal created
                while time.perf_counter() < deadline:
                    await store.create_run(version, {}, tenant_id=TENANT, count_in_quota=True)
                    created += 1

            began = time.perf_counter()
            await asyncio.gather(*(submit() for _ in range(args.concurrency)))
            elapsed = time.perf_counter() - began
        finally:
            await store.close()
    return {
        "case": "quota" if quota else "no quota",
        "concurrency": args.concurrency,
        "commit_delay_us": args.commit_delay_us,
        "runs": created,
        "runs_per_s": round(created / elapsed, 1),
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commit-delay-us", type=int, default=0, help="0 to 100000")
    return parser.parse_args(argv)


async def amain(args: argparse.Namespace) -> None:
    for _ in range(args.rounds):
        for quota in (True, False):
            print(json.dumps(await measure(quota, args)), flush=True)


def main(argv: Sequence[str] | None = None) -> None:
    asyncio.run(amain(parse_args(argv)))


if __name__ == "__main__":
    main()
