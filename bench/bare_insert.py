"""The stack's floor: a bare FastAPI + asyncpg endpoint inserting one row per request.

    python -m bench.bare_insert --dsn postgresql://postgres@127.0.0.1:5432/DB [--port 0]

`POST /rows` with a JSON body `{"input": …, "tenantId": …}` (the shape of a run submission)
inserts one row (a new UUID, the tenant, the input as JSON text, the time) into `bare_row`
(created if missing) and answers 201 `{"id": …}`. No authentication, no validation beyond
FastAPI's body parsing, one statement per request: what any Python web service on this stack
pays at least for a durable write. Served by uvicorn (httptools, uvloop) on a socket bound
before it starts (port 0: a free one), as the API is; the first stdout line is `bare listening
on URL`. SIGINT/SIGTERM stop it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import asyncpg
import uvicorn
import uvloop
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

POOL_SIZE = 10
"""Connections per process: SchemaBridge's API uses SQLAlchemy's default pool of 5 + 10."""
CREATE = """
CREATE TABLE IF NOT EXISTS bare_row (
    id text PRIMARY KEY, tenant_id text NOT NULL, input json NOT NULL, created_at float8 NOT NULL
)"""
INSERT = "INSERT INTO bare_row (id, tenant_id, input, created_at) VALUES ($1, $2, $3, $4)"


class Submission(BaseModel):
    input: Any = None
    tenantId: str = Field(default="default")  # the REST API's field name


def build_app(dsn: str) -> FastAPI:
    pool: list[asyncpg.Pool] = []

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        created = await asyncpg.create_pool(dsn, min_size=2, max_size=POOL_SIZE)
        async with created.acquire() as conn, conn.transaction():
            # Two processes starting at once would race on CREATE TABLE IF NOT EXISTS.
            await conn.execute("SELECT pg_advisory_xact_lock(7311)")
            await conn.execute(CREATE)
        pool.append(created)
        try:
            yield
        finally:
            await created.close()

    app = FastAPI(lifespan=lifespan)

    @app.post("/rows", status_code=201)
    async def insert(body: Submission) -> JSONResponse:
        row_id = str(uuid.uuid4())
        async with pool[0].acquire() as conn:
            await conn.execute(INSERT, row_id, body.tenantId, json.dumps(body.input), time.time())
        return JSONResponse({"id": row_id}, status_code=201)

    return app


class _Server(uvicorn.Server):
    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and sockets:
            port = sockets[0].getsockname()[1]
            print(f"bare listening on http://127.0.0.1:{port}", flush=True)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    sock = socket.create_server(("127.0.0.1", args.port), backlog=2048)
    # Served as `schemabridge api` serves (api/rest/server.py): TCP_NODELAY on the listening
    # socket, httptools, uvloop. Until 2026-12-03 this ran on asyncio's loop without it, and
    # every kept-alive request waited ~40 ms for a delayed ACK: the "floor" was that wait.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    config = uvicorn.Config(
        build_app(args.dsn), http="httptools", log_level="warning", access_log=False
    )
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
