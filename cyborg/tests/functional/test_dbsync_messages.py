"""What cyborg-dbsync tells an operator whose database setting is wrong."""
import importlib.util
import os
import subprocess
import sys

import pytest

from cyborg.db import migration
from cyborg.tests import conftest
from cyborg.tests import utils

_EXAMPLES = ('mysql+pymysql://USER:PASSWORD@HOST/cyborg, '
             'postgresql+psycopg2://USER:PASSWORD@HOST/cyborg or '
             'sqlite:////var/lib/cyborg/cyborg.sqlite.')


def _dbsync(tmp_path, connection: str, *args: str
            ) -> subprocess.CompletedProcess:
    conf = tmp_path / 'cyborg.conf'
    conf.write_text(f'[database]\nconnection = {connection}\n')
    return subprocess.run(
        [sys.executable, '-m', 'cyborg.cmd.dbsync', '--config-file',
         str(conf), *(args or ('upgrade',))],
        capture_output=True, text=True, timeout=120)


def _error(result: subprocess.CompletedProcess) -> str:
    """The one line of an error, without the program name."""
    assert result.returncode == 1
    assert 'Traceback' not in result.stderr, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith('cyborg-dbsync: ')
    return line.removeprefix('cyborg-dbsync: ')


def test_empty_connection(tmp_path):
    assert _error(_dbsync(tmp_path, '')) == (
        f'[database] connection is empty. Set it in '
        f'{tmp_path / "cyborg.conf"} to the URL of cyborg\'s database, '
        f'e.g. {_EXAMPLES}')


def test_not_a_url(tmp_path):
    assert _error(_dbsync(tmp_path, 'cyborg@localhost')) == (
        f'[database] connection "cyborg@localhost" is not a database URL. '
        f'Use a URL such as {_EXAMPLES}')


def test_unknown_kind_of_database(tmp_path):
    message = _error(_dbsync(tmp_path, 'mariadb2://root@localhost/cyborg'))

    assert message.startswith(
        '[database] connection "mariadb2://root@localhost/cyborg" names a '
        'kind of database SQLAlchemy does not know (')


def test_driver_not_installed(tmp_path):
    if importlib.util.find_spec('sqlcipher3'):
        pytest.skip('the driver this test needs to be missing is installed')
    url = f'sqlite+pysqlcipher:///{tmp_path}/c.sqlite'

    message = _error(_dbsync(tmp_path, url))

    assert message.startswith(f'cannot reach the database at {url}: its '
                              f'Python driver is not installed (')
    assert message.endswith('Install it, or name an installed driver in the '
                            'URL (mysql+pymysql://, postgresql+psycopg2://).')


def test_password_is_not_shown(tmp_path):
    message = _error(_dbsync(tmp_path,
                             'mysql+pymysql://cyborg:s3cret@127.0.0.1:1/c'))

    assert 's3cret' not in message
    assert message.startswith('cannot reach the database at '
                              'mysql+pymysql://cyborg:***@127.0.0.1:1/c: ')
    assert message.endswith(
        'Check that the server runs, that the database exists and that the '
        f'user may use it, or correct [database] connection in '
        f'{tmp_path / "cyborg.conf"}.')


def test_missing_database_on_a_real_server(tmp_path):
    if not utils.port_open(conftest.MYSQL_URL, 3306):
        conftest.unavailable('mysql', f'nothing listens at '
                                      f'{conftest.MYSQL_URL}')
    url = conftest.MYSQL_URL.rstrip('/') + '/cyborg_test_does_not_exist'

    message = _error(_dbsync(tmp_path, url))

    assert "Unknown database 'cyborg_test_does_not_exist'" in message
    assert 'that the database exists' in message


def test_upgrade_says_where_and_what(tmp_path):
    url = f'sqlite:///{tmp_path}/cyborg.sqlite'

    result = _dbsync(tmp_path, url)

    assert result.returncode == 0, result.stderr
    assert (f'The database at {url} is at revision {migration.head()}.'
            in result.stderr)


def test_no_configuration_file_is_a_warning(tmp_path):
    if any(os.path.exists(path) for path in ('/etc/cyborg/cyborg.conf',
                                             '/etc/cyborg.conf')):
        pytest.skip('this machine has a cyborg.conf under /etc')
    # HOME holds no cyborg.conf either.
    result = subprocess.run(
        [sys.executable, '-m', 'cyborg.cmd.dbsync', 'version'],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env=dict(os.environ, HOME=str(tmp_path)))

    assert result.returncode == 0, result.stderr
    assert result.stdout == 'None\n'
    assert 'No configuration file was found' in result.stderr
    assert f'sqlite:///{tmp_path}/.cyborg/cyborg.sqlite' in result.stderr
