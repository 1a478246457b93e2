"""What a database holds, told apart before any migration touches it.

``cyborg-dbsync upgrade`` runs only on an empty database or on one with
cyborg's own schema; ``cyborg-dbsync adopt`` takes over one made by
OpenStack Cyborg 17.0.0. Anything else is refused with what was found,
so that no migration runs on a database it was not written for.
"""
import dataclasses
import enum

import sqlalchemy as sa

# OpenStack Cyborg's migrations, oldest first; 17.0.0 ends at the last.
UPSTREAM_REVISIONS = (
    'f50980397351', 'd6f033d8fa5b', 'ede4e3f1a232', '589ff20545b7',
    'c1b5abada09c', '57539722e5cf', '22fb1af2d51e', '7b696fd94949',
    '62bcf2610c5d', '7a4fd0fc3f8c', '60d8ac91fd20', '7e6f1f107f2b',
    '899cead40bc9', '4cc1d79978fc', '6c77bd6afea5', '9625668549b5',
    'a35b4295a0e5', 'b47c8f2d1e3a')
UPSTREAM_HEAD = UPSTREAM_REVISIONS[-1]
UPSTREAM_RELEASE = 'OpenStack Cyborg 17.0.0'

# Its tables, parents before children.
UPSTREAM_TABLES = (
    'devices', 'controlpath_ids', 'deployables', 'attributes',
    'attach_handles', 'device_profiles', 'extended_accelerator_requests',
    'quota_usages', 'reservations')
VERSION_TABLE = 'alembic_version'
# The enum types its migrations create on PostgreSQL; cyborg's schema has
# none (its enums are checked strings).
PG_ENUM_TYPES = ('attach_type', 'control_type', 'cpid_type', 'device_state',
                 'device_status', 'device_type', 'state', 'substate')

# While an adoption runs, the upstream tables keep their rows under this
# prefix; their version table's row says how far it got.
PREFIX = 'upstream_'
ADOPTED = 'adopted'


class Kind(enum.Enum):
    EMPTY = 'empty'
    OURS = 'ours'
    UPSTREAM = 'upstream'
    ADOPTING = 'adopting'
    OTHER = 'other'


@dataclasses.dataclass(frozen=True)
class Found:
    kind: Kind
    # Cyborg's revision (OURS), the upstream one (UPSTREAM, ADOPTING).
    revision: str | None = None
    # What it is, for a message, when it is neither empty nor ours.
    description: str = ''


def version_of(connection: sa.engine.Connection, table: str) -> str | None:
    rows = connection.execute(
        sa.text(f'SELECT version_num FROM {table}')).scalars().all()
    return rows[0] if len(rows) == 1 else None


def _listing(tables: list[str], limit: int = 8) -> str:
    shown = ', '.join(tables[:limit])
    if len(tables) > limit:
        shown += f' and {len(tables) - limit} more'
    return shown


def recognise(connection: sa.engine.Connection,
              our_revisions: set[str]) -> Found:
    """Tell what the database behind ``connection`` holds.

    :param our_revisions: the ids of cyborg's own migrations.
    """
    tables = sorted(sa.inspect(connection).get_table_names())
    if PREFIX + VERSION_TABLE in tables:
        return Found(Kind.ADOPTING,
                     version_of(connection, PREFIX + VERSION_TABLE),
                     f'an adoption of an {UPSTREAM_RELEASE} database '
                     'that has not finished')
    others = [t for t in tables if t != VERSION_TABLE]
    revision = (version_of(connection, VERSION_TABLE)
                if VERSION_TABLE in tables else None)
    if revision is None and not others:
        return Found(Kind.EMPTY)
    if revision in our_revisions:
        return Found(Kind.OURS, revision)
    if revision == UPSTREAM_HEAD:
        missing = [t for t in UPSTREAM_TABLES if t not in tables]
        if not missing:
            return Found(Kind.UPSTREAM, revision,
                         f'an {UPSTREAM_RELEASE} database')
        return Found(Kind.OTHER, revision,
                     f'an {UPSTREAM_RELEASE} schema version '
                     f'({revision}) without its tables '
                     f'{_listing(missing)}')
    if revision in UPSTREAM_REVISIONS:
        return Found(Kind.OTHER, revision,
                     f'an OpenStack Cyborg database at migration '
                     f'{revision}, older than {UPSTREAM_RELEASE}\'s last '
                     f'({UPSTREAM_HEAD}): upgrade it with OpenStack '
                     'Cyborg 17.0.0\'s own "cyborg-dbsync upgrade" first')
    if revision is not None:
        return Found(Kind.OTHER, revision,
                     f'a database at schema version {revision}, which '
                     'is neither one of cyborg\'s nor one of OpenStack '
                     'Cyborg\'s')
    return Found(Kind.OTHER, None,
                 f'{len(others)} table(s) without a schema version: '
                 f'{_listing(others)}')
