"""Projects and limits: private device profiles, limited and expiring
accelerator requests.

``device_profiles.is_public`` (true for every existing profile) and
``device_profile_projects``, the projects allowed a private profile.
``accelerator_requests.resource_class`` is the class of the accelerator a
request asks for (``FPGA`` for a group's ``resources:FPGA``), filled in
here for the requests already stored, so that the devices a project has
bound are counted per class in SQL. ``accelerator_requests.idempotency_key``
is a create's client-chosen key. ``project_locks`` has a row per project
that a write limited by the project's limits locks first, so that two
such writes of one project run one after the other.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-28 07:30:00
"""
import json

import sqlalchemy as sa
from alembic import op

revision = '0010'
down_revision = '0009'
branch_labels = None
depends_on = None

RESOURCES = 'resources:'
# The classes of amounts, which ask for no accelerator (as
# cyborg.db.api.device_profiles.AMOUNT_CLASSES was when this ran).
AMOUNT_CLASSES = ('VGPU_DISPLAY_HEAD', 'NET_BW_EGR_KILOBIT_PER_SEC',
                  'NET_BW_IGR_KILOBIT_PER_SEC', 'MEM_ENCRYPTION_CONTEXT')


def _classes(group: dict[str, str]) -> list[str]:
    """The class of each accelerator of a group, in the order the
    requests of the group were made."""
    return [key[len(RESOURCES):] for key, value in group.items()
            if key.startswith(RESOURCES)
            and key[len(RESOURCES):] not in AMOUNT_CLASSES
            for _ in range(int(value))]


def _fill_resource_classes() -> None:
    arqs = sa.table('accelerator_requests', sa.column('id', sa.Integer),
                    sa.column('device_profile_group', sa.Text),
                    sa.column('resource_class', sa.String))
    bind = op.get_bind()
    rows = bind.execute(sa.select(
        arqs.c.id, arqs.c.device_profile_group).order_by(arqs.c.id)).all()
    for row in rows:
        try:
            classes = _classes(json.loads(row.device_profile_group))
        except (TypeError, ValueError):
            continue
        if classes:
            # Requests of one group share it in nearly every profile; a
            # group of several classes is counted under its first.
            bind.execute(sa.update(arqs).where(arqs.c.id == row.id)
                         .values(resource_class=classes[0]))


def upgrade() -> None:
    with op.batch_alter_table('device_profiles') as batch:
        batch.add_column(sa.Column('is_public', sa.Boolean(),
                                   nullable=False, server_default=sa.true()))
    op.create_table(
        'device_profile_projects',
        sa.Column('device_profile_id', sa.Integer(), nullable=False),
        sa.Column('project_id', sa.String(255), nullable=False),
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('updated_at', sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(
            ['device_profile_id'], ['device_profiles.id'],
            name=op.f('fk_device_profile_projects_device_profile_id_'
                      'device_profiles'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_device_profile_projects')),
        sa.UniqueConstraint(
            'device_profile_id', 'project_id',
            name=op.f('uq_device_profile_projects_device_profile_id_'
                      'project_id')),
    )
    op.create_index(op.f('ix_device_profile_projects_project_id'),
                    'device_profile_projects', ['project_id'])
    with op.batch_alter_table('accelerator_requests') as batch:
        batch.add_column(sa.Column('resource_class', sa.String(255),
                                   nullable=True))
        batch.add_column(sa.Column('idempotency_key', sa.String(255),
                                   nullable=True))
        batch.create_index(
            op.f('ix_accelerator_requests_project_id_idempotency_key'),
            ['project_id', 'idempotency_key'])
    _fill_resource_classes()
    op.create_table(
        'project_locks',
        sa.Column('project_id', sa.String(255), nullable=False),
        sa.Column('id', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('updated_at', sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_project_locks')),
        sa.UniqueConstraint('project_id',
                            name=op.f('uq_project_locks_project_id')),
    )
