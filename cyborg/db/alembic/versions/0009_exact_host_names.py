"""Exact host names, and devices kept while their driver is turned off.

On MySQL and MariaDB every host and compute node name column gets a
binary collation that does not pad (see ``models.host_collation``), so a
name that differs in case or trailing spaces matches no row, as on
PostgreSQL and SQLite. ``deployables.driver_disabled_since`` marks the
parts of devices whose driver an operator turned off on their host: their
rows stay, reserved in placement, until the driver reports them again.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27 19:00:00
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

revision = '0009'
down_revision = '0008'
branch_labels = None
depends_on = None

# (table, column, nullable) of every host or compute node name.
HOST_COLUMNS = (
    ('services', 'host', False),
    ('services', 'hostname', True),
    ('devices', 'host', False),
    ('devices', 'hostname', False),
    ('accelerator_requests', 'hostname', True),
    ('rp_removals', 'hostname', False),
    ('driver_states', 'host', False),
)




def upgrade() -> None:
    dialect = op.get_bind().dialect
    if dialect.name == 'mysql':
        # What models.HostName gives these columns, written out: a
        # migration stays as it ran whatever the models become.
        collation = ('utf8mb4_nopad_bin'
                     if getattr(dialect, 'is_mariadb', False)
                     else 'utf8mb4_0900_bin')
        host_type = mysql.VARCHAR(255, charset='utf8mb4',
                                  collation=collation)
        for table, column, nullable in HOST_COLUMNS:
            op.alter_column(table, column, type_=host_type,
                            existing_type=sa.String(255),
                            existing_nullable=nullable)
    with op.batch_alter_table('deployables') as batch:
        batch.add_column(sa.Column('driver_disabled_since', sa.DateTime(),
                                   nullable=True))
