"""Guru Meditation Reports (``cyborg.common.reports``): what a report
holds, what it masks and where it goes; the real processes' reports are
tested in ``functional/test_guru_meditation.py``."""
import os
import re
import threading
from importlib import metadata

import pytest
from oslo_config import cfg

from cyborg import version
from cyborg.common import reports


@pytest.mark.parametrize('value, masked', [
    ('mysql+pymysql://cyborg:s3cr%40t@db.example:3306/cyborg?charset=utf8',
     'mysql+pymysql://cyborg:***@db.example:3306/cyborg?charset=utf8'),
    # Every user of a transport URL of several hosts.
    ('rabbit://a:pa@h1:5672,b:pb@h2:5672/cyborg',
     'rabbit://a:***@h1:5672,b:***@h2:5672/cyborg'),
    # A password without a user (osprofiler's redis connection_string).
    ('redis://:pw@127.0.0.1:6379', 'redis://:***@127.0.0.1:6379'),
    # A user without a password, a port, an '@' in the path: nothing.
    ('rabbit://guest@h1:5672/', 'rabbit://guest@h1:5672/'),
    ('http://placement.example:8778/v1@x', 'http://placement.example:8778/v1@x'),
    ('sqlite:////var/lib/cyborg/cyborg.sqlite',
     'sqlite:////var/lib/cyborg/cyborg.sqlite'),
    (['rabbit://u:p@h/', 'plain'], ['rabbit://u:***@h/', 'plain']),
    ({'a': 'redis://u:p@h'}, {'a': 'redis://u:***@h'}),
    (3, 3), (None, None),
])
def test_mask(value, masked):
    assert reports.mask(value) == masked


def _sections(text: str) -> dict[str, str]:
    """A report's sections by title."""
    parts = re.split(r'(?m)^====\s+(.+?)\s+====$', text)
    return {title: body.strip('=\n') for title, body
            in zip(parts[1::2], parts[2::2], strict=True)}


@pytest.fixture
def conf():
    conf = cfg.ConfigOpts()
    conf.register_opts([cfg.StrOpt('connection', secret=True),
                        cfg.StrOpt('connection_string')], group='profiler')
    conf([], default_config_files=[])
    conf.set_override('connection', 'mysql+pymysql://u:DbPw@h/c',
                      'profiler')
    conf.set_override('connection_string', 'redis://:RedisPw@h:6379',
                      'profiler')
    reports.register_opts(conf)
    reports.GuruMeditation.conf = conf
    yield conf
    reports.GuruMeditation.conf = cfg.CONF


def test_report_sections(conf):
    ready, done = threading.Event(), threading.Event()

    def waiting() -> None:
        ready.set()
        done.wait()

    thread = threading.Thread(target=waiting, name='some-task')
    thread.start()
    ready.wait()
    try:
        text = reports.GuruMeditation(version).run()
    finally:
        done.set()
        thread.join()
    sections = _sections(text)
    assert list(sections) == ['Guru Meditation', 'Package', 'Threads',
                              'Processes', 'Configuration',
                              'Installed packages']
    assert f'version = {version.version_string()}' in sections['Package']
    # Named, each with its stack.
    assert re.search(r'Thread #\d+ \(some-task\)', sections['Threads'])
    assert re.search(r'Thread #\d+ \(MainThread\)', sections['Threads'])
    assert 'in waiting\n' in sections['Threads']
    assert f'Process {os.getpid()} ' in sections['Processes']
    configuration = sections['Configuration']
    assert 'connection = ***\n' in configuration
    assert 'connection_string = redis://:***@h:6379' in configuration
    assert 'DbPw' not in text and 'RedisPw' not in text
    assert 'file_event_handler = None' in configuration
    packages = dict(line.split(' = ') for line in
                    sections['Installed packages'].splitlines() if line)
    assert packages['oslo.config'] == metadata.version('oslo.config')
    # cyborg's requirements, not those of its tests.
    assert 'pytest' not in packages


def test_report_file_per_process(conf, tmp_path):
    reports.GuruMeditation.handle_signal(version, 'cyborg-test',
                                         str(tmp_path), None)
    [written] = tmp_path.iterdir()
    assert re.fullmatch(rf'cyborg-test\.{os.getpid()}_gurumeditation_'
                        r'\d{14}', written.name), written.name
    assert '====                            Threads' in written.read_text()
