"""What a small SQLite transaction costs the event loop's process, with the store's cursor (one
hop to the connection's thread per statement) and with aiosqlite's own (three or four).

    python -m bench.sqlite_statements [--transactions 3000] [--rounds 4]

On the store's own engines (`engine.store.db.create_engines`, a fresh file): a write
transaction of three statements (an UPDATE, a SELECT of one row, an INSERT, with the store's
BEGIN IMMEDIATE and COMMIT) and a read of one row by primary key, `--transactions` times each,
the two cursors alternating for `--rounds` rounds (which goes first alternates too). Prints
per round and as medians the wall time and the process's CPU per transaction. The "aiosqlite
cursor" variant puts aiosqlite's `Connection.cursor` back on the store's connection class for
its rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiosqlite
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from engine.store import sqlite_connections
from engine.store.db import create_engines

WARMUP = 200
VARIANTS = {
    "store cursor": sqlite_connections._Connection.cursor,
    "aiosqlite cursor": aiosqlite.Connection.cursor,
}


async def _write(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(text("UPDATE t SET v = v + 1 WHERE id = 1"))
        (await conn.execute(text("SELECT id, v FROM t WHERE id = 2"))).all()
        await conn.execute(text("INSERT INTO t (v) VALUES (0)"))


async def _read(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        (await conn.execute(text("SELECT id, v FROM t WHERE id = 2"))).all()


async def _per_transaction(
    action: Callable[[], Awaitable[None]], count: int
) -> tuple[float, float]:
    """(wall µs, CPU µs) per call of `action`, after a warm-up."""
    for _ in range(WARMUP):
        await action()
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(count):
        await action()
    return (time.perf_counter() - wall) * 1e6 / count, (time.process_time() - cpu) * 1e6 / count


async def _round(variant: str, workdir: Path, count: int) -> dict[str, float]:
    sqlite_connections._Connection.cursor = VARIANTS[variant]  # type: ignore[method-assign,assignment]
    engines = create_engines(f"sqlite+aiosqlite:///{workdir / f'{variant[0]}.db'}")
    try:
        async with engines.write.begin() as conn:
            await conn.execute(text("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v INT)"))
            await conn.execute(text("INSERT INTO t (v) VALUES (0), (0)"))
        write = await _per_transaction(lambda: _write(engines.write), count)
        read = await _per_transaction(lambda: _read(engines.read), count)
    finally:
        await engines.dispose()
        sqlite_connections._Connection.cursor = VARIANTS["store cursor"]  # type: ignore[method-assign,assignment]
    return {
        "write_wall_us": write[0],
        "write_cpu_us": write[1],
        "read_wall_us": read[0],
        "read_cpu_us": read[1],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--transactions", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args(argv)
    results: dict[str, list[dict[str, float]]] = {variant: [] for variant in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="sb-sqlite-bench-") as tmp:
        for n in range(args.rounds):
            order = list(VARIANTS) if n % 2 == 0 else list(reversed(VARIANTS))
            for variant in order:
                figures = asyncio.run(_round(variant, Path(tmp), args.transactions))
                results[variant].append(figures)
                shown = {k: round(v, 1) for k, v in figures.items()}
                print(json.dumps({"round": n + 1, "variant": variant, **shown}), flush=True)
    for variant, rounds in results.items():
        medians = {k: round(statistics.median(r[k] for r in rounds), 1) for k in rounds[0]}
        print(json.dumps({"median": variant, **medians}))


if __name__ == "__main__":
    main()
