"""every database gets an id of its own, which its Redis is bound to

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-07 01:00:00.000000

Processes coordinate through Redis (admission slots, breakers, rate limits, heartbeats, the
copy of operator settings) and keep the durable state in the database; nothing tied the two
together. A worker given another Redis than its cluster's ran beside it unseen (its own
admission slots, breakers and rate limits), and a database made anew read the Redis state of
the one before it (its tenants' limits, destinations, breakers). `store_identity` holds one
row (`one` = 1: a second cannot be inserted) with a random id, made by this migration (and
anew by the first process to start on a database whose tables were emptied), which a process
writes into its Redis on start when the key is absent and compares otherwise
(`engine.operations.startup`).
"""

from __future__ import annotations

import uuid

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table(
        "store_identity",
        sa.Column("one", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("id", sa.String(length=64), nullable=False),
    )
    op.bulk_insert(table, [{"one": 1, "id": uuid.uuid4().hex}])


def downgrade() -> None:
    op.drop_table("store_identity")
