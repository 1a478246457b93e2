"""Device health: the state a device's agent or an operator gave it.

``health`` and ``health_reason`` are what counts (an ``unhealthy`` device's
providers are reserved in placement); ``health_source`` says who set them.
The agent's own last reading is kept in ``agent_health`` and
``agent_health_reason`` so that clearing an operator's setting goes back
to it without waiting for the device to change. Devices known before this
revision have no reading yet: ``unknown``.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25 20:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None

_STATES = ('healthy', 'degraded', 'unhealthy', 'unknown')


def _state(name: str) -> sa.Enum:
    # A VARCHAR(32) with a CHECK constraint, as every enum column.
    return sa.Enum(*_STATES, name=op.f(f'ck_devices_{name}'),
                   native_enum=False, create_constraint=True, length=32)


def upgrade() -> None:
    with op.batch_alter_table('devices') as batch:
        batch.add_column(sa.Column('health', _state('health'),
                                   nullable=False,
                                   server_default='unknown'))
        batch.add_column(sa.Column('health_reason', sa.String(255),
                                   nullable=True))
        batch.add_column(sa.Column(
            'health_source',
            sa.Enum('agent', 'operator',
                    name=op.f('ck_devices_health_source'),
                    native_enum=False, create_constraint=True, length=32),
            nullable=False, server_default='agent'))
        batch.add_column(sa.Column('agent_health', _state('agent_health'),
                                   nullable=False,
                                   server_default='unknown'))
        batch.add_column(sa.Column('agent_health_reason', sa.String(255),
                                   nullable=True))
        batch.add_column(sa.Column('health_changed_at', sa.DateTime(),
                                   nullable=True))
        batch.create_index('ix_devices_health', ['health'])
