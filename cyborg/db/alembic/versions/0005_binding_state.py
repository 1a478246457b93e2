"""Binding state the database enforces: programming, releasing, claims.

A deployable records the device-side work under way on it (programming a
bitstream) so that binds and programs exclude each other through a
conditional UPDATE; an attach handle whose holder went away while its
device-side state (an mdev) was not yet confirmed gone stays taken, with
the time it was released; a handle its host no longer reports, kept while
a request holds it, is marked so that it is never handed out again; and
each instance with accelerator requests
holds one claim row, so that two PATCHes binding one instance cannot
both win.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24 08:20:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('deployables') as batch:
        batch.add_column(sa.Column('action', sa.String(16), nullable=True))
        batch.add_column(sa.Column('action_bitstream_id', sa.String(36),
                                   nullable=True))
        batch.add_column(sa.Column('action_since', sa.DateTime(),
                                   nullable=True))
    with op.batch_alter_table('attach_handles') as batch:
        batch.add_column(sa.Column('released_at', sa.DateTime(),
                                   nullable=True))
        batch.add_column(sa.Column('missing_since', sa.DateTime(),
                                   nullable=True))
    op.create_table(
        'instance_claims',
        sa.Column('instance_uuid', sa.String(36), nullable=False),
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('updated_at', sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_instance_claims')),
        sa.UniqueConstraint('instance_uuid',
                            name=op.f('uq_instance_claims_instance_uuid')),
    )
    # Instances bound before this revision hold their claim already.
    op.execute(
        'INSERT INTO instance_claims (instance_uuid, created_at) '
        'SELECT DISTINCT instance_uuid, CURRENT_TIMESTAMP '
        'FROM accelerator_requests WHERE instance_uuid IS NOT NULL')
