"""Events owed to Nova, stored: an outbox row per event.

The ``accelerator-request-bound`` event of a bind is written in the
transaction that ends the bind and deleted once Nova answered for it, so
a conductor that stops before it told Nova loses nothing: any conductor
sends what is owed.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27 19:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'nova_events',
        sa.Column('arq_uuid', sa.String(36), nullable=False),
        sa.Column('instance_uuid', sa.String(36), nullable=False),
        sa.Column('status', sa.Enum(
            'completed', 'failed', name=op.f('ck_nova_events_status'),
            native_enum=False, create_constraint=True, length=32),
            nullable=False),
        sa.Column('reason', sa.String(255), nullable=True),
        sa.Column('attempts', sa.Integer(), nullable=False),
        sa.Column('claim', sa.String(36), nullable=True),
        sa.Column('next_attempt_at', sa.DateTime(), nullable=False),
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('updated_at', sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_nova_events')),
        sa.UniqueConstraint('arq_uuid',
                            name=op.f('uq_nova_events_arq_uuid')),
    )
    op.create_index(op.f('ix_nova_events_next_attempt_at'), 'nova_events',
                    ['next_attempt_at'])
