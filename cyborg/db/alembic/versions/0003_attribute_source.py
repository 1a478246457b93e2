"""Attributes remember who set them: a driver's report or an operator.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 05:10:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Every attribute so far came from a report, or cannot be told apart
    # from one: 'driver' keeps today's behaviour for them.
    with op.batch_alter_table('attributes') as batch:
        batch.add_column(sa.Column('source', sa.String(16), nullable=False,
                                   server_default='driver'))
