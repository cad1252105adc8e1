"""Alembic environment: migrations run on a connection handed in by `engine.store.db.upgrade`."""

from __future__ import annotations

from alembic import context
from sqlmodel import SQLModel

from engine.store import models  # noqa: F401  (registers the tables on SQLModel.metadata)

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("run migrations through `schemabridge db upgrade` (engine.store.db.upgrade)")

context.configure(
    connection=connection,
    target_metadata=SQLModel.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
