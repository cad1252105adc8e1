"""step tenant item taken

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01 18:30:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "step",
        sa.Column("tenant_item_taken", sa.Boolean(), nullable=False, server_default=sa.false()),
    )


def downgrade() -> None:
    op.drop_column("step", "tenant_item_taken")
