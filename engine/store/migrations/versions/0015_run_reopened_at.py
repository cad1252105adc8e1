"""when a run's held steps were last released, and an index of held steps

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-05 08:00:00.000000

A flush or a requeue that read a run as stopped holds its step back as PENDING; if an
operator reopens the run while that transaction is still open, the reopen cannot see the
held step and the step would stay PENDING in a RUNNING run. `reopened_at` lets the reaper
look again, for a while, at the held steps of the runs reopened lately: `ix_run_reopened`
finds those runs (status first, so SQLite picks it without statistics) and `ix_step_held`
their held steps, however large the step table.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

REOPENED = sa.text("reopened_at IS NOT NULL")
HELD = sa.text("status = 'PENDING' AND deps_pending = 0")


def upgrade() -> None:
    op.add_column("run", sa.Column("reopened_at", sa.Float(), nullable=True))
    op.create_index(
        "ix_run_reopened",
        "run",
        ["status", "reopened_at"],
        postgresql_where=REOPENED,
        sqlite_where=REOPENED,
    )
    op.create_index("ix_step_held", "step", ["run_id"], postgresql_where=HELD, sqlite_where=HELD)


def downgrade() -> None:
    op.drop_index("ix_step_held", table_name="step")
    op.drop_index("ix_run_reopened", table_name="run")
    with op.batch_alter_table("run") as batch:
        batch.drop_column("reopened_at")
