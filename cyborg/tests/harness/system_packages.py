"""Parts of the machine some tests need and install themselves: Debian
packages through apt-get, and Python packages built against them into
the test environment through pip.

Installing needs root and the package registries; a machine without
either skips those tests (or fails them under
CYBORG_TEST_REQUIRE_SERVICES=1, see ``conftest.unavailable``). Two
pytest workers may ask at once: one installs while the other waits on a
file lock, then finds everything there.
"""
import importlib
import importlib.util
import os
import shutil
import subprocess
import sys

from cyborg.tests import utils
from cyborg.tests.conftest import unavailable

LOCK = '/tmp/cyborg-test-packages.lock'
# Seconds for an apt-get update or install, or a pip build: a first
# install of libvirt and QEMU takes one to two minutes here.
TIMEOUT = 900


def _installed(package: str) -> bool:
    found = subprocess.run(
        ['dpkg-query', '-W', '-f=${Status}', package],
        capture_output=True, text=True, check=False)
    return found.stdout.strip() == 'install ok installed'


def _run(argv: list[str], what: str) -> None:
    env = dict(os.environ, DEBIAN_FRONTEND='noninteractive')
    done = subprocess.run(argv, capture_output=True, text=True, env=env,
                          timeout=TIMEOUT, check=False)
    if done.returncode != 0:
        unavailable(what, f'{" ".join(argv[:4])} ... failed: '
                          f'{(done.stderr or done.stdout)[-500:]}')


def debian(*packages: str) -> None:
    """Install the Debian ``packages`` not installed yet."""
    if shutil.which('dpkg-query') is None:
        unavailable(', '.join(packages), 'this is not a Debian machine')
    if all(_installed(p) for p in packages):
        return
    if os.geteuid() != 0 or shutil.which('apt-get') is None:
        unavailable(', '.join(packages),
                    'not installed, and only root can install them')
    with utils.file_lock(LOCK):
        missing = [p for p in packages if not _installed(p)]
        if not missing:
            return
        _run(['apt-get', 'update', '-q'], 'apt-get update')
        _run(['apt-get', 'install', '-y', '-q', '--no-install-recommends',
              *missing], ', '.join(missing))


def python(module: str, requirement: str) -> None:
    """Make ``module`` importable, pip-installing ``requirement`` into
    this interpreter's environment when it is not."""
    if importlib.util.find_spec(module) is not None:
        return
    with utils.file_lock(LOCK):
        if importlib.util.find_spec(module) is None:
            _run([sys.executable, '-m', 'pip', 'install', '-q',
                  requirement], requirement)
    importlib.invalidate_caches()
    if importlib.util.find_spec(module) is None:
        unavailable(requirement, f'{module} is still not importable')
