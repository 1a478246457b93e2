"""The committed samples (configuration, policy) and every option's help."""
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
# (generator module, its config, the committed sample, the tox env)
SAMPLES = [
    ('oslo_config.generator', GENERATOR_CONF, SAMPLE, 'genconfig'),
    ('oslo_policy.generator',
     ROOT / 'tools' / 'config' / 'cyborg-policy-generator.conf',
     ROOT / 'etc' / 'cyborg' / 'policy.yaml.sample', 'genpolicy'),
]

# Library defaults read from the environment; the committed sample must
# not depend on who generated it.
_ENV_DEFAULTS = ('OSLO_LOCK_PATH',)


def _generate(module: str, config: pathlib.Path,
              output: pathlib.Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in _ENV_DEFAULTS}
    # A child process: the generator imports every library namespace,
    # some of which pull in modules cyborg itself never loads.
    entry = ('generate_sample' if module == 'oslo_policy.generator'
             else 'main')
    proc = subprocess.run(
        [sys.executable, '-c',
         f'import sys; from {module} import {entry}; sys.exit({entry}())',
         '--config-file', str(config), '--output-file', str(output)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f'{module} failed:\n{proc.stderr}'


@pytest.mark.skipif(not GENERATOR_CONF.exists(),
                    reason='not a source tree: no generator config')
@pytest.mark.parametrize('module, config, sample, tox_env', SAMPLES,
                         ids=['config', 'policy'])
def test_sample_is_up_to_date(tmp_path, module, config, sample, tox_env):
    generated = tmp_path / sample.name
    _generate(module, config, generated)
    expected = generated.read_text().splitlines(keepends=True)
    committed = (sample.read_text().splitlines(keepends=True)
                 if sample.exists() else [])
    name = sample.relative_to(ROOT)
    if committed != expected:
        diff = ''.join(difflib.unified_diff(
            committed, expected, f'{name} (committed)',
            f'{name} (generated)'))
        lines = diff.splitlines()
        if len(lines) > 60:
            diff = '\n'.join(lines[:60] + ['...'])
        pytest.fail(
            f'{name} is out of date; run `tox -e {tox_env}` and commit the '
            'result.\n' + diff, pytrace=False)


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
