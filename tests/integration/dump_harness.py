"""A whole database as text: every row of every table, every column (for canary searches)."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import MetaData, select
from sqlalchemy.ext.asyncio import create_async_engine


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


async def dump_database(url: str) -> dict[str, list[str]]:
    """{table: [one line per row: its columns' values as text]}, for every table (the schema
    read from the database itself, so a table added later is searched too)."""
    engine = create_async_engine(url)
    try:
        metadata = MetaData()
        async with engine.connect() as conn:
            await conn.run_sync(metadata.reflect)
            dump: dict[str, list[str]] = {}
            for table in metadata.sorted_tables:
                rows = (await conn.execute(select(table))).all()
                dump[table.name] = [" | ".join(_text(value) for value in row) for row in rows]
    finally:
        await engine.dispose()
    return dump


def hits(dump: dict[str, list[str]], needle: str) -> list[str]:
    """`table: row` for every row that contains `needle`."""
    return [f"{table}: {row}" for table, rows in dump.items() for row in rows if needle in row]
