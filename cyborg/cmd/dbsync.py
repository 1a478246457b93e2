"""cyborg-dbsync: creates and upgrades cyborg's database schema."""
import argparse
import logging
import sys
from collections.abc import Callable

import sqlalchemy as sa
from alembic import util as alembic_util
from oslo_config import cfg
from oslo_log import log

import cyborg.cmd  # noqa: F401  (native threads first)
from cyborg import version as cyborg_version
from cyborg.common import exception
from cyborg.conf import CONF
from cyborg.db import adoption
from cyborg.db import migration

PROG = 'cyborg-dbsync'

LOG = logging.getLogger(__name__)

_URL_EXAMPLES = ('mysql+pymysql://USER:PASSWORD@HOST/cyborg, '
                 'postgresql+psycopg2://USER:PASSWORD@HOST/cyborg or '
                 'sqlite:////var/lib/cyborg/cyborg.sqlite')

_DESCRIPTION = (
    "Creates and upgrades the schema of cyborg's database: the one named by "
    "[database] connection in the configuration files (by default an SQLite "
    "file under [DEFAULT] state_path). Run 'upgrade' after installing or "
    "upgrading cyborg, before starting its services, e.g. "
    "'cyborg-dbsync --config-file /etc/cyborg/cyborg.conf upgrade'.")


def _do_upgrade() -> None:
    migration.upgrade(_revision_given() or 'head')
    LOG.info('The database at %s is at revision %s.', _database(),
             migration.version())


def _do_stamp() -> None:
    revision = _revision_given()
    if not revision:
        # argparse requires one, but takes an empty --revision "".
        sys.exit('cyborg-dbsync stamp: name the revision to record.')
    migration.stamp(revision)


def _do_adopt() -> None:
    dry_run = CONF.command.dry_run
    plan = adoption.adopt(dry_run=dry_run)
    if plan is None:
        return
    verb = 'would come across' if dry_run else 'came across'
    print(f'From the OpenStack Cyborg 17.0.0 database at {_database()}, '
          f'these rows {verb} with their ids, uuids and resource-provider '
          'uuids:')
    for line in plan.summary():
        print(f'  {line}')
    if plan.changes:
        print('Changed on the way:')
        for line in plan.changes:
            print(f'  {line}')
    left = ', '.join(f'{t} ({n} rows)' for t, n in plan.left.items())
    print(f'Left behind: {left}; OpenStack Cyborg never enforced quotas.')
    if dry_run:
        print('Dry run: nothing was changed.')
    else:
        print(f'The database is at cyborg\'s revision '
              f'{migration.version()}; start cyborg\'s services.')


def _do_version() -> None:
    print(migration.version())


def _do_revision() -> None:
    migration.revision(CONF.command.message,
                       autogenerate=CONF.command.autogenerate)


def _revision_given() -> str | None:
    return CONF.command.revision_arg or CONF.command.revision


def _add_revision_args(parser: argparse.ArgumentParser, what: str,
                       required: bool) -> None:
    # As an argument or as an option, whichever the operator remembers.
    group = parser.add_mutually_exclusive_group(required=required)
    help_text = (f'the revision {what}: a revision id such as '
                 f'{migration.head()}, or "head" for the newest one')
    if not required:
        help_text += ' (default: head)'
    group.add_argument('revision_arg', nargs='?', metavar='REVISION',
                       help=help_text)
    group.add_argument('--revision', help='the same, as an option')


def _add_command(subparsers: argparse._SubParsersAction, name: str,
                 func: Callable[[], None], help_text: str
                 ) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(name, help=help_text,
                                   description=help_text)
    parser.set_defaults(func=func)
    return parser


def _add_commands(subparsers: argparse._SubParsersAction) -> None:
    parser = _add_command(
        subparsers, 'upgrade', _do_upgrade,
        'Run the migrations that the database has not had yet, up to a '
        'revision (the newest by default). Running it again does nothing.')
    _add_revision_args(parser, 'to upgrade to', required=False)

    parser = _add_command(
        subparsers, 'adopt', _do_adopt,
        'Take over, in place, a database made by OpenStack Cyborg 17.0.0 '
        '(with its services stopped and a backup taken): its devices, '
        'profiles and accelerator requests keep their ids, uuids and '
        'resource providers. It checks everything first and changes '
        'nothing when a check fails; a run that fails later gives the '
        'upstream tables their names back. Run it again to finish one '
        'that was interrupted.')
    parser.add_argument('--dry-run', action='store_true',
                        help='say what would come across and what would '
                             'change, and change nothing')

    _add_command(
        subparsers, 'version', _do_version,
        'Print the revision the database is at, or "None" when it has no '
        'cyborg schema yet.')

    parser = _add_command(
        subparsers, 'stamp', _do_stamp,
        'Record a revision as the one the database is at, without running '
        'any migration: for a database whose schema was made by other '
        'means.')
    _add_revision_args(parser, 'to record', required=True)

    parser = _add_command(
        subparsers, 'revision', _do_revision,
        'For cyborg developers: write a new migration script under '
        'cyborg/db/alembic/versions.')
    parser.add_argument('-m', '--message', required=True,
                        help='what the migration does, in a few words; '
                             'it also names the file')
    parser.add_argument('--autogenerate', action='store_true',
                        help='fill the script with the difference between '
                             'cyborg.db.models and the database, which '
                             'must be at the newest revision')


_command_opt = cfg.SubCommandOpt(
    'command', title='commands', handler=_add_commands,
    help=f'run "{PROG} COMMAND --help" for the options of a command')


def _fail(message: object) -> int:
    """Print one line to stderr; an operator needs no traceback here."""
    print(f'{PROG}:', *str(message).split(), file=sys.stderr)
    return 1


def _database() -> str:
    """[database] connection without its password."""
    return migration.safe_url(CONF.database.connection)


def _config_files() -> str:
    """Where [database] connection is set, for a message."""
    sources = list(CONF.config_file)
    if CONF.config_dir:
        sources.append(CONF.config_dir)
    if sources:
        return 'in ' + ', '.join(sources)
    return ('in a configuration file (none was found: give one with '
            '--config-file)')


def _not_reachable(exc: exception.DBNotReachable) -> str:
    """What went wrong with [database] connection, and what to do."""
    url, reason = exc.kwargs['url'], exc.kwargs['reason']
    cause = exc.__cause__
    if not CONF.database.connection:
        return (f'[database] connection is empty. Set it {_config_files()} '
                f'to the URL of cyborg\'s database, e.g. {_URL_EXAMPLES}.')
    if isinstance(cause, sa.exc.NoSuchModuleError):
        return (f'[database] connection "{url}" names a kind of database '
                f'SQLAlchemy does not know ({reason}). Use a URL such as '
                f'{_URL_EXAMPLES}.')
    if isinstance(cause, sa.exc.ArgumentError):
        return (f'[database] connection "{url}" is not a database URL. Use '
                f'a URL such as {_URL_EXAMPLES}.')
    if isinstance(cause, ImportError):
        return (f'cannot reach the database at {url}: its Python driver is '
                f'not installed ({reason}). Install it, or name an '
                f'installed driver in the URL (mysql+pymysql://, '
                f'postgresql+psycopg2://).')
    return (f'cannot reach the database at {url}: {reason}. Check that the '
            f'server runs, that the database exists and that the user may '
            f'use it, or correct [database] connection {_config_files()}.')


def main(argv: list[str] | None = None) -> int:
    """Run one sub-command; return the process exit status."""
    CONF.register_cli_opt(_command_opt)
    log.register_options(CONF)
    # stdout carries the answer of "version"; logs go to stderr.
    CONF.set_default('use_stderr', True)
    try:
        CONF(sys.argv[1:] if argv is None else argv, project='cyborg',
             prog=PROG, version=cyborg_version.version_string(),
             description=_DESCRIPTION)
    except cfg.Error as exc:  # a missing or malformed configuration file
        return _fail(exc)
    log.setup(CONF, 'cyborg')
    if not (CONF.config_file or CONF.config_dir):
        LOG.warning('No configuration file was found (cyborg.conf in '
                    '~/.cyborg, ~, /etc/cyborg or /etc); give one with '
                    '--config-file. Using the default database %s.',
                    _database())
    try:
        CONF.command.func()
    except exception.DBNotReachable as exc:
        return _fail(_not_reachable(exc))
    except (alembic_util.CommandError,  # e.g. an unknown revision
            exception.ForeignDatabase, exception.AdoptionRefused) as exc:
        return _fail(exc)
    except sa.exc.SQLAlchemyError as exc:  # a migration the DB refused
        LOG.debug('%s failed', CONF.command.name, exc_info=True)
        reason = getattr(exc, 'orig', None) or exc
        return _fail(f'{CONF.command.name} failed on the database at '
                     f'{_database()}: {reason} (--debug shows where)')
    return 0


if __name__ == '__main__':
    sys.exit(main())
