"""a deployment counts the submissions its candidate's inputSchema refused

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05 04:00:00.000000

A submission routed to a deployment's candidate that the candidate's inputSchema refuses (a
422) creates no run, so the deployment's figures, read from its runs, never saw it: a
candidate that refuses what clients send stayed in its first stage with "0 runs" and was never
rolled back. `candidate_refused` counts those refusals on the deployment's row (one UPDATE in
the refusal's path, nothing on any other), and `refused_before_stage` is its value when the
stage in force began (copied by the statement that moves the stage), so a stage's refusals
are the difference. Not null, 0 for the deployments that existed before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("deployment") as batch:
        batch.add_column(
            sa.Column("candidate_refused", sa.Integer(), nullable=False, server_default="0")
        )
        batch.add_column(
            sa.Column("refused_before_stage", sa.Integer(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("deployment") as batch:
        batch.drop_column("refused_before_stage")
        batch.drop_column("candidate_refused")
