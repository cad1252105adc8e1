"""when a stopped run was last reopened

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05 08:00:00.000000

A flush, a requeue or a claim that read a run as stopped holds its step back as PENDING; if
an operator reopens the run while that transaction is still open, the reopen cannot see the
held step and the step would stay PENDING in a RUNNING run. `reopened_at` lets the reaper
look again, for a while, at the held steps of the runs reopened recently (the partial index
keeps that read to those runs).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

REOPENED = sa.text("reopened_at IS NOT NULL")


def upgrade() -> None:
    op.add_column("run", sa.Column("reopened_at", sa.Float(), nullable=True))
    op.create_index(
        "ix_run_reopened",
        "run",
        ["reopened_at"],
        postgresql_where=REOPENED,
        sqlite_where=REOPENED,
    )


def downgrade() -> None:
    op.drop_index("ix_run_reopened", table_name="run")
    with op.batch_alter_table("run") as batch:
        batch.drop_column("reopened_at")
