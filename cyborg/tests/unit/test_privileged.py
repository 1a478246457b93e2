"""Running drivers' external tools: argument lists, root helper, errors."""
import os
import shlex
import time

import pytest

from cyborg.accelerator.drivers import privileged
from cyborg.common import exception


def _script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text('#!/bin/sh\n' + body)
    path.chmod(0o755)
    return str(path)


def _run(argv, **kwargs):
    return privileged.execute(argv, action='program', device='0000:5e:00.0',
                              **kwargs)


def test_arguments_reach_the_tool_unchanged_and_stdout_returns(tmp_path):
    log = tmp_path / 'argv'
    tool = _script(tmp_path, 'tool',
                   f'printf "%s\\n" "$@" > {shlex.quote(str(log))}\n'
                   'echo done\n')
    odd = 'a file; rm -rf / $(id) `x` "q"'
    assert _run([tool, '--bus', '0x5e', odd]) == 'done\n'
    assert log.read_text().splitlines() == ['--bus', '0x5e', odd]


def test_non_zero_exit_raises_with_stderr(tmp_path):
    tool = _script(tmp_path, 'tool',
                   'echo progress\necho "Error: bitstream mismatch" >&2\n'
                   'exit 3\n')
    with pytest.raises(exception.DeviceActionError) as err:
        _run([tool])
    text = str(err.value)
    assert 'Cannot program on 0000:5e:00.0' in text
    assert 'exited with status 3' in text
    assert 'Error: bitstream mismatch' in text
    assert 'progress' not in text


def test_stdout_is_the_error_when_stderr_is_empty(tmp_path):
    tool = _script(tmp_path, 'tool', 'echo "ERROR: no device"\nexit 1\n')
    with pytest.raises(exception.DeviceActionError,
                       match='ERROR: no device'):
        _run([tool])


def test_long_output_is_cut_to_its_end(tmp_path):
    tool = _script(tmp_path, 'tool',
                   'i=0; while [ $i -lt 500 ]; do echo "line $i" >&2; '
                   'i=$((i+1)); done; exit 1\n')
    with pytest.raises(exception.DeviceActionError) as err:
        _run([tool])
    text = str(err.value)
    assert 'line 499' in text and 'line 0\n' not in text
    assert len(text) < privileged.MAX_OUTPUT + 200


def test_missing_tool_raises(tmp_path):
    with pytest.raises(exception.DeviceActionError,
                       match='cannot run .*no-such-tool'):
        _run([str(tmp_path / 'no-such-tool')])


def test_a_tool_over_its_time_is_stopped(tmp_path):
    pid_file = tmp_path / 'pid'
    tool = _script(tmp_path, 'tool',
                   f'echo $$ > {shlex.quote(str(pid_file))}\nexec sleep 30\n')
    started = time.monotonic()
    with pytest.raises(exception.DeviceActionError,
                       match='did not finish within 0.5 seconds'):
        _run([tool], timeout=0.5)
    assert time.monotonic() - started < 10
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_root_helper_prefixes_the_command_when_not_root(tmp_path,
                                                        monkeypatch):
    log = tmp_path / 'helper'
    helper = _script(tmp_path, 'helper',
                     f'echo "$@" > {shlex.quote(str(log))}\n'
                     'shift 2\nexec "$@"\n')
    tool = _script(tmp_path, 'tool', 'echo ran\n')
    monkeypatch.setattr(os, 'geteuid', lambda: 1000)
    assert _run([tool, 'x'], root_helper=f'{helper} --as root') == 'ran\n'
    assert log.read_text().split() == ['--as', 'root', tool, 'x']


def test_no_root_helper_runs_the_tool_directly(tmp_path, monkeypatch):
    tool = _script(tmp_path, 'tool', 'echo ran\n')
    monkeypatch.setattr(os, 'geteuid', lambda: 1000)
    assert _run([tool]) == 'ran\n'
