"""Initial schema: services, the device inventory, profiles and ARQs.

Revision ID: 0001
Revises:
Create Date: 2026-11-22 08:04:17
"""
import sqlalchemy as sa
from alembic import op

revision = '0001'
down_revision = None
branch_labels = None
depends_on = None

# Constraint and index names are written out in full, as the naming
# convention of cyborg.db.models produced them when this was written, so
# that a later change of the convention cannot change what this creates.


def _enum(table: str, column: str, *values: str) -> sa.Enum:
    # A VARCHAR(32) with a CHECK constraint named ck_<table>_<column>.
    return sa.Enum(*values, name=op.f(f'ck_{table}_{column}'),
                   native_enum=False, create_constraint=True, length=32)


def _fk(column: str, table: str, referred: str,
        ondelete: str = 'RESTRICT') -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        [column], [f'{referred}.id'],
        name=op.f(f'fk_{table}_{column}_{referred}'), ondelete=ondelete)


def _create_table(name: str, *items: sa.schema.SchemaItem) -> None:
    """Create ``name`` with the id and timestamps every table has."""
    op.create_table(
        name,
        *items,
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('updated_at', sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint('id', name=op.f(f'pk_{name}')),
    )


def upgrade() -> None:
    _create_table(
        'services',
        sa.Column('host', sa.String(255), nullable=False),
        sa.Column('binary',
                  _enum('services', 'binary',
                        'cyborg-conductor', 'cyborg-agent'),
                  nullable=False),
        sa.Column('hostname', sa.String(255), nullable=True),
        sa.Column('version', sa.String(64), nullable=False),
        sa.Column('last_seen_at', sa.DateTime(), nullable=False),
        sa.UniqueConstraint('host', 'binary',
                            name=op.f('uq_services_host_binary')),
    )
    _create_table(
        'devices',
        sa.Column('uuid', sa.String(36), nullable=False),
        sa.Column('type',
                  _enum('devices', 'type', 'GPU', 'FPGA', 'AICHIP', 'QAT',
                        'NIC', 'SSD', 'PCI'),
                  nullable=False),
        sa.Column('vendor', sa.String(255), nullable=False),
        sa.Column('model', sa.String(255), nullable=False),
        sa.Column('std_board_info', sa.Text(), nullable=True),
        sa.Column('vendor_board_info', sa.Text(), nullable=True),
        sa.Column('host', sa.String(255), nullable=False),
        sa.Column('hostname', sa.String(255), nullable=False),
        sa.Column('status',
                  _enum('devices', 'status', 'enabled', 'maintaining'),
                  nullable=False),
        sa.UniqueConstraint('uuid', name=op.f('uq_devices_uuid')),
        sa.Index(op.f('ix_devices_host'), 'host'),
        sa.Index(op.f('ix_devices_hostname'), 'hostname'),
        sa.Index(op.f('ix_devices_type'), 'type'),
    )
    _create_table(
        'controlpath_ids',
        sa.Column('uuid', sa.String(36), nullable=False),
        sa.Column('device_id', sa.Integer(), nullable=False),
        sa.Column('cpid_type', _enum('controlpath_ids', 'cpid_type', 'PCI'),
                  nullable=False),
        sa.Column('cpid_info', sa.String(255), nullable=False),
        _fk('device_id', 'controlpath_ids', 'devices'),
        sa.UniqueConstraint('uuid', name=op.f('uq_controlpath_ids_uuid')),
        sa.UniqueConstraint('device_id',
                            name=op.f('uq_controlpath_ids_device_id')),
    )
    _create_table(
        'deployables',
        sa.Column('uuid', sa.String(36), nullable=False),
        sa.Column('parent_id', sa.Integer(), nullable=True),
        sa.Column('root_id', sa.Integer(), nullable=True),
        sa.Column('name', sa.String(255), nullable=False),
        sa.Column('num_accelerators', sa.Integer(), nullable=False),
        sa.Column('device_id', sa.Integer(), nullable=False),
        sa.Column('rp_uuid', sa.String(36), nullable=True),
        sa.Column('driver_name', sa.String(100), nullable=True),
        sa.Column('bitstream_id', sa.String(36), nullable=True),
        _fk('parent_id', 'deployables', 'deployables'),
        _fk('root_id', 'deployables', 'deployables'),
        _fk('device_id', 'deployables', 'devices'),
        sa.UniqueConstraint('uuid', name=op.f('uq_deployables_uuid')),
        sa.UniqueConstraint('rp_uuid', name=op.f('uq_deployables_rp_uuid')),
        sa.UniqueConstraint('device_id', 'name',
                            name=op.f('uq_deployables_device_id_name')),
        sa.Index(op.f('ix_deployables_parent_id'), 'parent_id'),
        sa.Index(op.f('ix_deployables_root_id'), 'root_id'),
    )
    _create_table(
        'attributes',
        sa.Column('uuid', sa.String(36), nullable=False),
        sa.Column('deployable_id', sa.Integer(), nullable=False),
        sa.Column('key', sa.String(255), nullable=False),
        sa.Column('value', sa.Text(), nullable=False),
        _fk('deployable_id', 'attributes', 'deployables'),
        sa.UniqueConstraint('uuid', name=op.f('uq_attributes_uuid')),
        sa.UniqueConstraint('deployable_id', 'key',
                            name=op.f('uq_attributes_deployable_id_key')),
    )
    _create_table(
        'attach_handles',
        sa.Column('uuid', sa.String(36), nullable=False),
        sa.Column('deployable_id', sa.Integer(), nullable=False),
        sa.Column('cpid_id', sa.Integer(), nullable=False),
        sa.Column('in_use', sa.Boolean(), nullable=False),
        sa.Column('attach_type',
                  _enum('attach_handles', 'attach_type',
                        'PCI', 'MDEV', 'TEST_PCI'),
                  nullable=False),
        sa.Column('attach_info', sa.String(255), nullable=False),
        _fk('deployable_id', 'attach_handles', 'deployables'),
        _fk('cpid_id', 'attach_handles', 'controlpath_ids'),
        sa.UniqueConstraint('uuid', name=op.f('uq_attach_handles_uuid')),
        sa.UniqueConstraint(
            'deployable_id', 'attach_info',
            name=op.f('uq_attach_handles_deployable_id_attach_info')),
        sa.Index(op.f('ix_attach_handles_deployable_id_in_use'),
                 'deployable_id', 'in_use'),
    )
    _create_table(
        'device_profiles',
        sa.Column('uuid', sa.String(36), nullable=False),
        sa.Column('name', sa.String(255), nullable=False),
        sa.Column('groups', sa.Text(), nullable=False),
        sa.Column('description', sa.Text(), nullable=True),
        sa.UniqueConstraint('uuid', name=op.f('uq_device_profiles_uuid')),
        sa.UniqueConstraint('name', name=op.f('uq_device_profiles_name')),
    )
    _create_table(
        'accelerator_requests',
        sa.Column('uuid', sa.String(36), nullable=False),
        sa.Column('project_id', sa.String(255), nullable=True),
        sa.Column('state',
                  _enum('accelerator_requests', 'state',
                        'Initial', 'BindStarted', 'Bound', 'Unbound',
                        'BindFailed', 'UnbindFailed', 'Deleting'),
                  nullable=False),
        sa.Column('device_profile_id', sa.Integer(), nullable=True),
        sa.Column('device_profile_name', sa.String(255), nullable=False),
        sa.Column('device_profile_group_id', sa.Integer(), nullable=False),
        sa.Column('device_profile_group', sa.Text(), nullable=False),
        sa.Column('hostname', sa.String(255), nullable=True),
        sa.Column('device_rp_uuid', sa.String(36), nullable=True),
        sa.Column('instance_uuid', sa.String(36), nullable=True),
        sa.Column('attach_handle_id', sa.Integer(), nullable=True),
        sa.Column('deployable_id', sa.Integer(), nullable=True),
        # A profile may be deleted while its requests live on: they keep
        # their own copy of its name and group.
        _fk('device_profile_id', 'accelerator_requests', 'device_profiles',
            ondelete='SET NULL'),
        _fk('attach_handle_id', 'accelerator_requests', 'attach_handles'),
        _fk('deployable_id', 'accelerator_requests', 'deployables'),
        sa.UniqueConstraint('uuid', name=op.f('uq_accelerator_requests_uuid')),
        sa.Index(op.f('ix_accelerator_requests_instance_uuid'),
                 'instance_uuid'),
        sa.Index(op.f('ix_accelerator_requests_project_id'), 'project_id'),
        sa.Index(op.f('ix_accelerator_requests_state'), 'state'),
    )
