"""which worker holds a step's claim

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-07 08:00:00.000000

A RUNNING step whose worker was killed stays RUNNING until its lease ends. `claimed_by` names
the holder (its service id, as its heartbeat names it), written by the claim statement itself
and cleared with the claim token, so that an operator reading the step can tell a live holder
from a dead one. Nullable, no default: existing claims read as held by an unknown worker until
they end.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("step", sa.Column("claimed_by", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("step") as batch:
        batch.drop_column("claimed_by")
