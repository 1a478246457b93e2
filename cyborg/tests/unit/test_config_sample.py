"""The committed sample configuration and the help text of every option."""
import difflib
import os
import pathlib
import subprocess
import sys

import pytest
from oslo_config import cfg

from cyborg.conf import opts

ROOT = pathlib.Path(__file__).resolve().parents[3]
GENERATOR_CONF = ROOT / 'tools' / 'config' / 'cyborg-config-generator.conf'
SAMPLE = ROOT / 'etc' / 'cyborg' / 'cyborg.conf.sample'

# Library defaults read from the environment; the committed sample must
# not depend on who generated it.
_ENV_DEFAULTS = ('OSLO_LOCK_PATH',)


def _generate(output: pathlib.Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in _ENV_DEFAULTS}
    # A child process: the generator imports every library namespace,
    # some of which pull in modules cyborg itself never loads.
    proc = subprocess.run(
        [sys.executable, '-m', 'oslo_config.generator',
         '--config-file', str(GENERATOR_CONF),
         '--output-file', str(output)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (
        f'oslo-config-generator failed:\n{proc.stderr}')


@pytest.mark.skipif(not GENERATOR_CONF.exists(),
                    reason='not a source tree: no generator config')
def test_sample_config_is_up_to_date(tmp_path):
    generated = tmp_path / 'cyborg.conf.sample'
    _generate(generated)
    expected = generated.read_text().splitlines(keepends=True)
    committed = (SAMPLE.read_text().splitlines(keepends=True)
                 if SAMPLE.exists() else [])
    if committed != expected:
        diff = ''.join(difflib.unified_diff(
            committed, expected, 'etc/cyborg/cyborg.conf.sample (committed)',
            'etc/cyborg/cyborg.conf.sample (generated)'))
        lines = diff.splitlines()
        if len(lines) > 60:
            diff = '\n'.join(lines[:60] + ['...'])
        pytest.fail(
            'etc/cyborg/cyborg.conf.sample is out of date with the options; '
            'run `tox -e genconfig` and commit the result.\n' + diff,
            pytrace=False)


def _all_opts() -> list[tuple[str, cfg.Opt]]:
    found = []
    for group, group_opts in opts.list_opts():
        name = group if isinstance(group, str) else group.name
        found.extend((name, opt) for opt in group_opts)
    return found


@pytest.mark.parametrize('group, opt', _all_opts(),
                         ids=lambda v: v if isinstance(v, str) else v.dest)
def test_every_option_has_help(group, opt):
    assert opt.help and opt.help.strip(), (
        f'[{group}] {opt.dest} has no help text')


def test_every_option_group_has_help():
    for group, _ in opts.list_opts():
        if isinstance(group, cfg.OptGroup):
            assert group.help and group.help.strip(), (
                f'[{group.name}] has no help text')


def test_option_names_are_unique_per_group():
    seen: set[tuple[str, str]] = set()
    for group, opt in _all_opts():
        assert (group, opt.dest) not in seen, (
            f'[{group}] {opt.dest} is defined twice')
        seen.add((group, opt.dest))
