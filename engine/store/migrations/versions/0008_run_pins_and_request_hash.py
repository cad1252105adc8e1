"""run pinned versions and request hash

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01 23:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("run") as batch:
        batch.add_column(sa.Column("pinned_versions", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("request_hash", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("run") as batch:
        batch.drop_column("request_hash")
        batch.drop_column("pinned_versions")
