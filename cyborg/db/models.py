"""SQLAlchemy 2 models of every cyborg table.

Alembic migrations under ``cyborg/db/alembic/versions`` create exactly this
schema; a test compares the two on SQLite, MariaDB and PostgreSQL.
"""
import datetime

import sqlalchemy as sa
from oslo_utils import timeutils
from sqlalchemy import orm
from sqlalchemy.dialects import mysql

from cyborg.common.device_health import HEALTH_SOURCES
from cyborg.common.device_health import HEALTH_STATES
from cyborg.common.device_report import ATTACH_TYPES
from cyborg.common.device_report import CLEAN_STATES
from cyborg.common.device_report import CPID_TYPES
from cyborg.common.device_report import DEVICE_STATUSES
from cyborg.common.device_report import DEVICE_TYPES
from cyborg.common.device_report import DRIVER_STATES
from cyborg.common.device_report import LAYOUT_STATES

# States of an accelerator request; every one of them is reachable.
ARQ_STATES = ('Initial', 'BindStarted', 'Bound', 'Unbound', 'BindFailed',
              'UnbindFailed', 'Deleting')
SERVICE_BINARIES = ('cyborg-conductor', 'cyborg-agent')

NAMING_CONVENTION = {
    'ix': 'ix_%(table_name)s_%(column_0_N_name)s',
    'uq': 'uq_%(table_name)s_%(column_0_N_name)s',
    'fk': 'fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s',
    'pk': 'pk_%(table_name)s',
    'ck': 'ck_%(table_name)s_%(constraint_name)s',
}


def _utcnow() -> datetime.datetime:
    return timeutils.utcnow()


def _enum(values: tuple[str, ...], name: str) -> sa.Enum:
    # A VARCHAR with a CHECK constraint behaves the same on all three
    # databases and can gain a value without PostgreSQL's ALTER TYPE.
    return sa.Enum(*values, name=name, native_enum=False,
                   create_constraint=True, length=32)


def host_collation(dialect: sa.engine.Dialect) -> str:
    """The MySQL collation of host-name columns on this server.

    MySQL's and MariaDB's default collations ignore case and trailing
    spaces, so ``RELNODE1 `` would find the row of ``relnode1`` and the
    RPC would go to a host that has no agent. Binary collations compare
    exactly, but ``utf8mb4_bin`` still pads (ignores trailing spaces);
    these two do not. PostgreSQL and SQLite compare exactly already.
    """
    return ('utf8mb4_nopad_bin' if getattr(dialect, 'is_mariadb', False)
            else 'utf8mb4_0900_bin')


class HostName(sa.types.TypeDecorator[str]):
    """A host or compute node name, compared exactly on every database
    (see ``host_collation``)."""

    impl = sa.String(255)
    cache_ok = True

    def load_dialect_impl(self, dialect: sa.engine.Dialect
                          ) -> sa.types.TypeEngine[str]:
        if dialect.name == 'mysql':
            return dialect.type_descriptor(mysql.VARCHAR(
                255, charset='utf8mb4', collation=host_collation(dialect)))
        return dialect.type_descriptor(sa.String(255))


class Base(orm.DeclarativeBase):
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)

    id: orm.Mapped[int] = orm.mapped_column(sa.Integer, primary_key=True)
    created_at: orm.Mapped[datetime.datetime] = orm.mapped_column(
        sa.DateTime, default=_utcnow, nullable=False)
    updated_at: orm.Mapped[datetime.datetime | None] = orm.mapped_column(
        sa.DateTime, onupdate=_utcnow, nullable=True)


class Service(Base):
    """A running conductor or agent, kept alive by its heartbeats."""

    __tablename__ = 'services'
    __table_args__ = (
        sa.UniqueConstraint('host', 'binary'),
    )

    host: orm.Mapped[str] = orm.mapped_column(HostName())
    binary: orm.Mapped[str] = orm.mapped_column(
        _enum(SERVICE_BINARIES, 'binary'))
    hostname: orm.Mapped[str | None] = orm.mapped_column(HostName())
    version: orm.Mapped[str] = orm.mapped_column(sa.String(64))
    last_seen_at: orm.Mapped[datetime.datetime] = orm.mapped_column(
        sa.DateTime)


class Device(Base):
    """A physical accelerator card (or PCI device) on one host."""

    __tablename__ = 'devices'
    __table_args__ = (
        sa.Index(None, 'host'),
        sa.Index(None, 'hostname'),
        sa.Index(None, 'type'),
        sa.Index(None, 'health'),
    )

    uuid: orm.Mapped[str] = orm.mapped_column(sa.String(36), unique=True)
    type: orm.Mapped[str] = orm.mapped_column(_enum(DEVICE_TYPES, 'type'))
    vendor: orm.Mapped[str] = orm.mapped_column(sa.String(255))
    model: orm.Mapped[str] = orm.mapped_column(sa.String(255))
    std_board_info: orm.Mapped[str | None] = orm.mapped_column(sa.Text)
    vendor_board_info: orm.Mapped[str | None] = orm.mapped_column(sa.Text)
    # The agent's RPC name and the placement root provider name differ on
    # many hosts; both are kept so neither is guessed from the other.
    host: orm.Mapped[str] = orm.mapped_column(HostName())
    hostname: orm.Mapped[str] = orm.mapped_column(HostName())
    status: orm.Mapped[str] = orm.mapped_column(
        _enum(DEVICE_STATUSES, 'status'), default='enabled')
    # Why the device is in ``error`` (its preparation failed).
    status_reason: orm.Mapped[str | None] = orm.mapped_column(
        sa.String(255))
    # The operator's desired partitioning (JSON; None: as discovered), and
    # how far the agent got applying it.
    layout: orm.Mapped[str | None] = orm.mapped_column(sa.Text)
    layout_state: orm.Mapped[str | None] = orm.mapped_column(
        _enum(LAYOUT_STATES, 'layout_state'))
    layout_reason: orm.Mapped[str | None] = orm.mapped_column(
        sa.String(255))
    layout_changed_at: orm.Mapped[datetime.datetime | None] = (
        orm.mapped_column(sa.DateTime))
    # What counts (``unhealthy`` reserves the device in placement) and who
    # set it; an operator's setting stands until the operator clears it,
    # and the agent's last reading is kept to go back to then.
    health: orm.Mapped[str] = orm.mapped_column(
        _enum(HEALTH_STATES, 'health'), default='unknown',
        server_default='unknown')
    health_reason: orm.Mapped[str | None] = orm.mapped_column(
        sa.String(255))
    health_source: orm.Mapped[str] = orm.mapped_column(
        _enum(HEALTH_SOURCES, 'health_source'), default='agent',
        server_default='agent')
    agent_health: orm.Mapped[str] = orm.mapped_column(
        _enum(HEALTH_STATES, 'agent_health'), default='unknown',
        server_default='unknown')
    agent_health_reason: orm.Mapped[str | None] = orm.mapped_column(
        sa.String(255))
    health_changed_at: orm.Mapped[datetime.datetime | None] = (
        orm.mapped_column(sa.DateTime))


class ControlpathID(Base):
    """How the host addresses a device (its PCI address)."""

    __tablename__ = 'controlpath_ids'
    __table_args__ = (
        sa.UniqueConstraint('device_id'),
    )

    uuid: orm.Mapped[str] = orm.mapped_column(sa.String(36), unique=True)
    device_id: orm.Mapped[int] = orm.mapped_column(
        sa.ForeignKey('devices.id', ondelete='RESTRICT'))
    cpid_type: orm.Mapped[str] = orm.mapped_column(
        _enum(CPID_TYPES, 'cpid_type'))
    cpid_info: orm.Mapped[str] = orm.mapped_column(sa.String(255))


class Deployable(Base):
    """A schedulable part of a device: one resource provider in placement."""

    __tablename__ = 'deployables'
    __table_args__ = (
        sa.UniqueConstraint('device_id', 'name'),
        sa.Index(None, 'parent_id'),
        sa.Index(None, 'root_id'),
    )

    uuid: orm.Mapped[str] = orm.mapped_column(sa.String(36), unique=True)
    parent_id: orm.Mapped[int | None] = orm.mapped_column(
        sa.ForeignKey('deployables.id', ondelete='RESTRICT'))
    root_id: orm.Mapped[int | None] = orm.mapped_column(
        sa.ForeignKey('deployables.id', ondelete='RESTRICT'))
    name: orm.Mapped[str] = orm.mapped_column(sa.String(255))
    num_accelerators: orm.Mapped[int] = orm.mapped_column(sa.Integer)
    device_id: orm.Mapped[int] = orm.mapped_column(
        sa.ForeignKey('devices.id', ondelete='RESTRICT'))
    rp_uuid: orm.Mapped[str | None] = orm.mapped_column(
        sa.String(36), unique=True)
    driver_name: orm.Mapped[str | None] = orm.mapped_column(sa.String(100))
    bitstream_id: orm.Mapped[str | None] = orm.mapped_column(sa.String(36))
    # What the resource provider in placement was last made to hold (a
    # digest of its state), and the provider generation seen then; NULL
    # means placement has yet to be told.
    rp_synced: orm.Mapped[str | None] = orm.mapped_column(sa.String(64))
    rp_generation: orm.Mapped[int | None] = orm.mapped_column(sa.Integer)
    # Set while the host no longer reports the deployable but a request
    # still holds it; placement then reserves all of it.
    missing_since: orm.Mapped[datetime.datetime | None] = orm.mapped_column(
        sa.DateTime)
    # Set while an operator has turned the deployable's driver off on its
    # host: the rows stay (uuid, overrides, layout, provider) and
    # placement reserves all of it until the driver reports it again.
    driver_disabled_since: orm.Mapped[datetime.datetime | None] = (
        orm.mapped_column(sa.DateTime))
    # Device-side work under way ('programming'), taken and ended by
    # conditional UPDATEs so that binds and programs exclude each other
    # across conductors; the bitstream being loaded, and since when (a
    # conductor that stopped mid-way leaves it for the stale sweep).
    action: orm.Mapped[str | None] = orm.mapped_column(sa.String(16))
    action_bitstream_id: orm.Mapped[str | None] = orm.mapped_column(
        sa.String(36))
    action_since: orm.Mapped[datetime.datetime | None] = orm.mapped_column(
        sa.DateTime)


# Attribute.source: a driver's report, or an operator's POST
# /v2/attributes (which reports leave alone).
ATTRIBUTE_FROM_DRIVER = 'driver'
ATTRIBUTE_SET_BY_OPERATOR = 'operator'


class Attribute(Base):
    """A key/value fact about a deployable (resource class, traits, ...)."""

    __tablename__ = 'attributes'
    __table_args__ = (
        sa.UniqueConstraint('deployable_id', 'key'),
    )

    uuid: orm.Mapped[str] = orm.mapped_column(sa.String(36), unique=True)
    deployable_id: orm.Mapped[int] = orm.mapped_column(
        sa.ForeignKey('deployables.id', ondelete='RESTRICT'))
    key: orm.Mapped[str] = orm.mapped_column(sa.String(255))
    value: orm.Mapped[str] = orm.mapped_column(sa.Text)
    source: orm.Mapped[str] = orm.mapped_column(
        sa.String(16), default=ATTRIBUTE_FROM_DRIVER,
        server_default=ATTRIBUTE_FROM_DRIVER)


class AttachHandle(Base):
    """What an instance gets attached: a PCI function or an mdev."""

    __tablename__ = 'attach_handles'
    __table_args__ = (
        sa.UniqueConstraint('deployable_id', 'attach_info'),
        sa.Index(None, 'deployable_id', 'in_use'),
    )

    uuid: orm.Mapped[str] = orm.mapped_column(sa.String(36), unique=True)
    deployable_id: orm.Mapped[int] = orm.mapped_column(
        sa.ForeignKey('deployables.id', ondelete='RESTRICT'))
    cpid_id: orm.Mapped[int] = orm.mapped_column(
        sa.ForeignKey('controlpath_ids.id', ondelete='RESTRICT'))
    in_use: orm.Mapped[bool] = orm.mapped_column(sa.Boolean, default=False)
    attach_type: orm.Mapped[str] = orm.mapped_column(
        _enum(ATTACH_TYPES, 'attach_type'))
    attach_info: orm.Mapped[str] = orm.mapped_column(sa.String(255))
    # Set when the request holding the handle went away before what it
    # made on the host (an mdev) was confirmed gone: the handle stays in
    # use until that removal is confirmed.
    released_at: orm.Mapped[datetime.datetime | None] = orm.mapped_column(
        sa.DateTime)
    # Set while the host no longer reports the handle but a request holds
    # it: it is never handed out again, and the next report after the
    # request lets go deletes it.
    missing_since: orm.Mapped[datetime.datetime | None] = orm.mapped_column(
        sa.DateTime)
    # Being cleaned after use, or held after a failed clean (why, and
    # since when): not offered either way.
    clean_state: orm.Mapped[str | None] = orm.mapped_column(
        _enum(CLEAN_STATES, 'clean_state'))
    clean_reason: orm.Mapped[str | None] = orm.mapped_column(sa.String(255))
    clean_since: orm.Mapped[datetime.datetime | None] = orm.mapped_column(
        sa.DateTime)


class DeviceProfile(Base):
    """A named list of request groups that flavors refer to."""

    __tablename__ = 'device_profiles'

    uuid: orm.Mapped[str] = orm.mapped_column(sa.String(36), unique=True)
    name: orm.Mapped[str] = orm.mapped_column(sa.String(255), unique=True)
    groups: orm.Mapped[str] = orm.mapped_column(sa.Text)
    description: orm.Mapped[str | None] = orm.mapped_column(sa.Text)
    # False: only the projects of device_profile_projects may see and use
    # it (and whoever sees every project).
    is_public: orm.Mapped[bool] = orm.mapped_column(
        sa.Boolean, default=True, server_default=sa.true())


class DeviceProfileProject(Base):
    """A project allowed a private device profile."""

    __tablename__ = 'device_profile_projects'
    __table_args__ = (
        sa.UniqueConstraint('device_profile_id', 'project_id'),
        sa.Index(None, 'project_id'),
    )

    device_profile_id: orm.Mapped[int] = orm.mapped_column(
        sa.ForeignKey('device_profiles.id', ondelete='CASCADE'))
    project_id: orm.Mapped[str] = orm.mapped_column(sa.String(255))


class AcceleratorRequest(Base):
    """An accelerator request (ARQ): one accelerator for one instance.

    The profile's name and group are copied in at creation, so editing or
    deleting the profile later never changes a live request.
    """

    __tablename__ = 'accelerator_requests'
    __table_args__ = (
        sa.Index(None, 'instance_uuid'),
        sa.Index(None, 'project_id'),
        sa.Index(None, 'state'),
        sa.Index(None, 'project_id', 'idempotency_key'),
    )

    uuid: orm.Mapped[str] = orm.mapped_column(sa.String(36), unique=True)
    project_id: orm.Mapped[str | None] = orm.mapped_column(sa.String(255))
    state: orm.Mapped[str] = orm.mapped_column(
        _enum(ARQ_STATES, 'state'), default='Initial')
    device_profile_id: orm.Mapped[int | None] = orm.mapped_column(
        sa.ForeignKey('device_profiles.id', ondelete='SET NULL'))
    device_profile_name: orm.Mapped[str] = orm.mapped_column(sa.String(255))
    device_profile_group_id: orm.Mapped[int] = orm.mapped_column(
        sa.Integer, default=0)
    device_profile_group: orm.Mapped[str] = orm.mapped_column(sa.Text)
    hostname: orm.Mapped[str | None] = orm.mapped_column(HostName())
    device_rp_uuid: orm.Mapped[str | None] = orm.mapped_column(
        sa.String(36))
    instance_uuid: orm.Mapped[str | None] = orm.mapped_column(sa.String(36))
    attach_handle_id: orm.Mapped[int | None] = orm.mapped_column(
        sa.ForeignKey('attach_handles.id', ondelete='RESTRICT'))
    deployable_id: orm.Mapped[int | None] = orm.mapped_column(
        sa.ForeignKey('deployables.id', ondelete='RESTRICT'))
    # The class of the accelerator asked for, from the group's
    # ``resources:<class>``: what a project's ``class:<class>`` limit
    # counts once the request holds a device.
    resource_class: orm.Mapped[str | None] = orm.mapped_column(
        sa.String(255))
    # The client's key of the create that made it (microversion 2.11): a
    # create repeated with it answers these requests again.
    idempotency_key: orm.Mapped[str | None] = orm.mapped_column(
        sa.String(255))


class ProjectLock(Base):
    """A project whose writes are limited: each such write locks the row
    first, so that two of one project run one after the other and
    neither counts before the other has written."""

    __tablename__ = 'project_locks'

    project_id: orm.Mapped[str] = orm.mapped_column(
        sa.String(255), unique=True)


class InstanceClaim(Base):
    """An instance that holds accelerator requests. Inserted by the bind
    that gives an instance its first requests: the unique key lets
    exactly one of two concurrent PATCHes for one instance win."""

    __tablename__ = 'instance_claims'

    instance_uuid: orm.Mapped[str] = orm.mapped_column(
        sa.String(36), unique=True)


class ProviderRemoval(Base):
    """A resource provider to delete from placement once nothing is
    allocated from it; written with the deletion of its deployable."""

    __tablename__ = 'rp_removals'
    __table_args__ = (
        sa.Index(None, 'hostname'),
    )

    rp_uuid: orm.Mapped[str] = orm.mapped_column(sa.String(36), unique=True)
    hostname: orm.Mapped[str] = orm.mapped_column(HostName())


class DriverState(Base):
    """The state of one enabled driver on one agent host, as its reports
    say; ``since`` is when it entered the state (for ``failed``, the
    first of the failures in a row)."""

    __tablename__ = 'driver_states'
    __table_args__ = (
        sa.UniqueConstraint('host', 'driver_name'),
    )

    host: orm.Mapped[str] = orm.mapped_column(HostName())
    driver_name: orm.Mapped[str] = orm.mapped_column(sa.String(100))
    state: orm.Mapped[str] = orm.mapped_column(
        _enum(DRIVER_STATES, 'state'))
    error: orm.Mapped[str | None] = orm.mapped_column(sa.Text)
    since: orm.Mapped[datetime.datetime] = orm.mapped_column(sa.DateTime)
    # The version of the package the agent loaded the driver from.
    version: orm.Mapped[str | None] = orm.mapped_column(sa.String(64))


# The statuses of an accelerator-request-bound event, as Nova takes them.
NOVA_EVENT_STATUSES = ('completed', 'failed')


class NovaEvent(Base):
    """An ``accelerator-request-bound`` event owed to Nova (an outbox row).

    Written in the transaction that ends its request's bind, deleted once
    Nova answered for it (see ``cyborg.db.api.nova_events``). The event's
    tag is the request's uuid. ``claim`` names the conductor pass sending
    it, until ``next_attempt_at``; after that, or with no claim, any
    conductor may send it then.
    """

    __tablename__ = 'nova_events'
    __table_args__ = (
        sa.Index(None, 'next_attempt_at'),
    )

    arq_uuid: orm.Mapped[str] = orm.mapped_column(sa.String(36),
                                                  unique=True)
    instance_uuid: orm.Mapped[str] = orm.mapped_column(sa.String(36))
    status: orm.Mapped[str] = orm.mapped_column(
        _enum(NOVA_EVENT_STATUSES, 'status'))
    # Why a bind failed, for its bind.error notification.
    reason: orm.Mapped[str | None] = orm.mapped_column(sa.String(255))
    attempts: orm.Mapped[int] = orm.mapped_column(sa.Integer, default=0)
    claim: orm.Mapped[str | None] = orm.mapped_column(sa.String(36))
    next_attempt_at: orm.Mapped[datetime.datetime] = orm.mapped_column(
        sa.DateTime)
