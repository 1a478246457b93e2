"""The real cyborg-dbsync command, run as a separate process."""
import subprocess
import sys

import pytest

from cyborg.db import migration

UNREACHABLE_URL = 'mysql+pymysql://root@127.0.0.1:1/nope'


def _dbsync(tmp_path, *args: str,
            connection: str | None = None) -> subprocess.CompletedProcess:
    connection = connection or f'sqlite:///{tmp_path}/state/cyborg.sqlite'
    conf = tmp_path / 'cyborg.conf'
    conf.write_text(f'[DEFAULT]\nstate_path = {tmp_path}\n'
                    f'[database]\nconnection = {connection}\n')
    return subprocess.run(
        [sys.executable, '-m', 'cyborg.cmd.dbsync', '--config-file',
         str(conf), *args],
        capture_output=True, text=True, timeout=120)


def test_upgrade_then_version_prints_head(tmp_path):
    before = _dbsync(tmp_path, 'version')
    assert (before.returncode, before.stdout) == (0, 'None\n'), before.stderr

    upgraded = _dbsync(tmp_path, 'upgrade')
    assert upgraded.returncode == 0, upgraded.stderr

    after = _dbsync(tmp_path, 'version')
    assert (after.returncode, after.stdout) == (0, f'{migration.head()}\n')


@pytest.mark.parametrize('args', [('head',), ('--revision', 'head')])
def test_stamp(tmp_path, args):
    stamped = _dbsync(tmp_path, 'stamp', *args)
    assert stamped.returncode == 0, stamped.stderr

    assert _dbsync(tmp_path, 'version').stdout == f'{migration.head()}\n'


def test_unreachable_database_is_one_line(tmp_path):
    result = _dbsync(tmp_path, 'upgrade', connection=UNREACHABLE_URL)

    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(
        f'cyborg-dbsync: cannot reach the database at {UNREACHABLE_URL}: ')
    assert 'Traceback' not in result.stderr


@pytest.mark.parametrize('args', [('upgrade', '--revision', 'nope'),
                                  ('stamp', 'nope')])
def test_unknown_revision_is_one_line(tmp_path, args):
    result = _dbsync(tmp_path, *args)

    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert lines[-1] == (
        "cyborg-dbsync: Can't locate revision identified by 'nope'")
    assert 'Traceback' not in result.stderr


@pytest.mark.parametrize('command', [(), ('upgrade',), ('version',),
                                     ('stamp',), ('revision',)])
def test_help(tmp_path, command):
    result = _dbsync(tmp_path, *command, '--help')

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith('usage: cyborg-dbsync')
    if not command:
        for name in ('upgrade', 'version', 'stamp', 'revision'):
            assert f'    {name} ' in result.stdout
