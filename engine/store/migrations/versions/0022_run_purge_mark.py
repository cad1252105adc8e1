"""the mark of a root run whose tree is being deleted

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-07 07:00:00.000000

Run retention (and `schemabridge runs purge`) deletes a large tree across several
transactions, children first and the root last. The first batch that takes a tree sets
`purge_started_at` on its root (and `purge_retention_s`, the retention of the worker's pass;
NULL for an operator's purge) in its own transaction, and the operator actions that would
reopen a run refuse one whose root is marked (docs/architecture.md, 'Run retention'): the
guard is the database's state, whatever the settings of the process that serves the action.
Both start NULL: no tree is being deleted when the column appears.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("run", sa.Column("purge_started_at", sa.Float(), nullable=True))
    op.add_column("run", sa.Column("purge_retention_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("run") as batch:
        batch.drop_column("purge_retention_s")
        batch.drop_column("purge_started_at")
