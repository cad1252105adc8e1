"""an index of payload chunks by age, for retention

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06 08:00:00.000000

Workers delete the payloads of runs that ended more than SCHEMABRIDGE_PAYLOAD_RETENTION_S
ago. A chunk is written before its run ends, so the deletion reads the chunks created before
its cutoff, oldest first, through this index, instead of joining every chunk of the store to
its run at each pass.
"""

from __future__ import annotations

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_payload_created", "payload", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_payload_created", table_name="payload")
