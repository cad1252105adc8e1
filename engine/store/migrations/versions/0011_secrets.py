"""secrets

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03 10:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "secret",
        sa.Column("tenant_id", sa.String(length=200), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("ciphertext", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("updated_by", sa.String(length=200), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "name"),
    )


def downgrade() -> None:
    op.drop_table("secret")
