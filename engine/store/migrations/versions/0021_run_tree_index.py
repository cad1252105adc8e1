"""an index of child runs by their root, for run retention

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-07 03:30:00.000000

Workers delete root runs that ended more than SCHEMABRIDGE_RUN_RETENTION_S ago with their whole
tree (docs/architecture.md, 'Run retention'). A nested fan-out's grandchildren name their root
in `root_run_id` but not their parent's parent, so the deletion finds a tree's runs here, in
bounded batches, and asks whether any of them still runs (`status`) with one probe. Children
only: a root is found by its own id.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

CHILDREN = sa.text("parent_run_id IS NOT NULL")


def upgrade() -> None:
    op.create_index(
        "ix_run_tree",
        "run",
        ["root_run_id", "status"],
        postgresql_where=CHILDREN,
        sqlite_where=CHILDREN,
    )


def downgrade() -> None:
    op.drop_index("ix_run_tree", table_name="run")
