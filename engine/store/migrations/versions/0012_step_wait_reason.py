"""step wait reason

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-20 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("step", sa.Column("wait_reason", sa.String(length=32), nullable=True))
    op.add_column("step", sa.Column("wait_message", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("step", "wait_message")
    op.drop_column("step", "wait_reason")
