"""Device lifecycle: preparing, layouts, cleaning, drivers turned off.

A device is ``preparing`` while its agent readies it, or in ``error``
(with ``status_reason``) when that failed. ``layout`` holds the operator's
desired partitioning (JSON: VF count, mdev type and count, region image),
``layout_state`` how far its agent got applying it. An attach handle is
``cleaning`` after use until its agent has cleaned it, or in
``maintenance`` when that failed (``clean_reason``): either way it is not
offered. A driver an operator turned off on a host is ``disabled``, and
each driver state row says which package version the agent runs.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25 21:00:00
"""
import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def _enum(table: str, column: str, values: tuple[str, ...]) -> sa.Enum:
    # A VARCHAR(32) with a CHECK constraint, as every enum column.
    return sa.Enum(*values, name=op.f(f'ck_{table}_{column}'),
                   native_enum=False, create_constraint=True, length=32)


def _recheck(table: str, column: str, values: tuple[str, ...]) -> None:
    """Give an enum column's CHECK constraint a new list of values."""
    listed = ', '.join(f"'{v}'" for v in values)
    with op.batch_alter_table(table) as batch:
        batch.drop_constraint(op.f(f'ck_{table}_{column}'), type_='check')
        batch.create_check_constraint(op.f(f'ck_{table}_{column}'),
                                      sa.text(f'{column} IN ({listed})'))


def upgrade() -> None:
    _recheck('devices', 'status',
             ('enabled', 'maintaining', 'preparing', 'error'))
    _recheck('driver_states', 'state',
             ('ok', 'no devices', 'failed', 'disabled'))
    with op.batch_alter_table('devices') as batch:
        batch.add_column(sa.Column('status_reason', sa.String(255),
                                   nullable=True))
        batch.add_column(sa.Column('layout', sa.Text(), nullable=True))
        batch.add_column(sa.Column(
            'layout_state',
            _enum('devices', 'layout_state',
                  ('pending', 'applying', 'applied', 'failed')),
            nullable=True))
        batch.add_column(sa.Column('layout_reason', sa.String(255),
                                   nullable=True))
        batch.add_column(sa.Column('layout_changed_at', sa.DateTime(),
                                   nullable=True))
    with op.batch_alter_table('attach_handles') as batch:
        batch.add_column(sa.Column(
            'clean_state',
            _enum('attach_handles', 'clean_state',
                  ('cleaning', 'maintenance')),
            nullable=True))
        batch.add_column(sa.Column('clean_reason', sa.String(255),
                                   nullable=True))
        batch.add_column(sa.Column('clean_since', sa.DateTime(),
                                   nullable=True))
    with op.batch_alter_table('driver_states') as batch:
        batch.add_column(sa.Column('version', sa.String(64), nullable=True))
