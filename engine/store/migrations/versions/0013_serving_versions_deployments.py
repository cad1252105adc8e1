"""serving versions, deployments, and how a run was routed

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03 09:00:00.000000

Every workflow published before this revision gets its latest version as the serving one:
that is the version its submissions were getting.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

RUNNING = sa.text("status = 'RUNNING'")


def upgrade() -> None:
    op.add_column("run", sa.Column("route", sa.String(length=16), nullable=True))
    op.create_table(
        "workflow_serving",
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("serving_version", sa.Integer(), nullable=False),
        sa.Column("candidate_version", sa.Integer(), nullable=True),
        sa.Column("candidate_weight", sa.Float(), server_default=sa.text("0"), nullable=False),
        sa.Column("deployment_id", sa.String(length=36), nullable=True),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.Column("updated_by", sa.String(length=200), nullable=True),
        sa.PrimaryKeyConstraint("name"),
    )
    op.execute(
        "INSERT INTO workflow_serving (name, serving_version, candidate_weight, updated_at, "
        "updated_by) SELECT name, MAX(version), 0, MAX(created_at), 'migration' "
        "FROM workflow_version GROUP BY name"
    )
    op.create_table(
        "deployment",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("workflow_name", sa.String(length=200), nullable=False),
        sa.Column("serving_version", sa.Integer(), nullable=False),
        sa.Column("candidate_version", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("stages", sa.JSON(), nullable=False),
        sa.Column("rollback", sa.JSON(), nullable=False),
        sa.Column("check_interval_s", sa.Float(), nullable=False),
        sa.Column("stage_index", sa.Integer(), nullable=False),
        sa.Column("stage_started_at", sa.Float(), nullable=False),
        sa.Column("run_id", sa.String(length=36), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("outcome", sa.JSON(), nullable=True),
        sa.Column("timeline", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "uq_deployment_running",
        "deployment",
        ["workflow_name"],
        unique=True,
        postgresql_where=RUNNING,
        sqlite_where=RUNNING,
    )
    op.create_index("ix_deployment_workflow_created", "deployment", ["workflow_name", "created_at"])
    op.create_index("ix_deployment_status", "deployment", ["status"])
    op.create_index("ix_deployment_run", "deployment", ["run_id"])


def downgrade() -> None:
    for name in [
        "ix_deployment_run",
        "ix_deployment_status",
        "ix_deployment_workflow_created",
        "uq_deployment_running",
    ]:
        op.drop_index(name, table_name="deployment")
    op.drop_table("deployment")
    op.drop_table("workflow_serving")
    op.drop_column("run", "route")
