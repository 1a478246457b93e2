"""Driver states: how each enabled driver of each agent host fared.

One row per agent host and enabled driver, written by the conductor from
the agent's reports: ``ok``, ``no devices`` or ``failed`` with the last
error, and since when the driver is in that state.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-24 10:40:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'driver_states',
        sa.Column('host', sa.String(255), nullable=False),
        sa.Column('driver_name', sa.String(100), nullable=False),
        # A VARCHAR(32) with a CHECK constraint, as every enum column.
        sa.Column('state',
                  sa.Enum('ok', 'no devices', 'failed',
                          name=op.f('ck_driver_states_state'),
                          native_enum=False, create_constraint=True,
                          length=32),
                  nullable=False),
        sa.Column('error', sa.Text(), nullable=True),
        sa.Column('since', sa.DateTime(), nullable=False),
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('updated_at', sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_driver_states')),
        sa.UniqueConstraint(
            'host', 'driver_name',
            name=op.f('uq_driver_states_host_driver_name')),
    )
