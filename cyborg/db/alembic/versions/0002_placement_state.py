"""Placement state: what each deployable's provider holds, and removals.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23 02:05:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('deployables') as batch:
        batch.add_column(sa.Column('rp_synced', sa.String(64),
                                   nullable=True))
        batch.add_column(sa.Column('rp_generation', sa.Integer(),
                                   nullable=True))
        batch.add_column(sa.Column('missing_since', sa.DateTime(),
                                   nullable=True))
    op.create_table(
        'rp_removals',
        sa.Column('rp_uuid', sa.String(36), nullable=False),
        sa.Column('hostname', sa.String(255), nullable=False),
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('updated_at', sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_rp_removals')),
        sa.UniqueConstraint('rp_uuid', name=op.f('uq_rp_removals_rp_uuid')),
        sa.Index(op.f('ix_rp_removals_hostname'), 'hostname'),
    )
