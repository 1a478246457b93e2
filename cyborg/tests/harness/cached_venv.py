"""Virtual environments built once per machine and kept, for tests.

``ensure`` installs requirements from the package index into an
environment under the user's cache directory (``$XDG_CACHE_HOME/
cyborg-tests``) the first time a test asks for it; pytest workers asking at
once wait on a file lock, and an environment that was not finished, or no
longer imports what it should, is built again. Where it cannot be built
(no index), the caller is skipped, or failed under
CYBORG_TEST_REQUIRE_SERVICES=1 (``conftest.unavailable``).
"""
import fcntl
import os
import pathlib
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence

from cyborg.tests.conftest import unavailable

# The file a finished build leaves in the environment.
COMPLETE = 'cyborg-tests-complete'
# Seconds for building an environment (43 s for upstream's with nothing
# in pip's cache, 17 s with its downloads there).
BUILD_TIMEOUT = 900


def cache_dir() -> pathlib.Path:
    base = os.environ.get('XDG_CACHE_HOME') or os.path.expanduser('~/.cache')
    return pathlib.Path(base) / 'cyborg-tests'


def python(path: pathlib.Path) -> pathlib.Path:
    return path / 'bin' / 'python'


def site_packages(path: pathlib.Path) -> pathlib.Path:
    """Where the environment at ``path`` installs packages."""
    version = f'python{sys.version_info[0]}.{sys.version_info[1]}'
    return path / 'lib' / version / 'site-packages'


def env() -> dict[str, str]:
    """The caller's environment for the commands of an environment of
    its own, without what would point their Python elsewhere: a
    PYTHONPATH naming the source tree would make them import this cyborg
    instead of the one installed there."""
    return {name: value for name, value in os.environ.items()
            if not name.startswith('PYTHON') and name != 'VIRTUAL_ENV'}


def _works(path: pathlib.Path, imports: str) -> bool:
    """Whether the environment at ``path`` was finished and imports
    ``imports`` (a comma-separated list of modules)."""
    if not (path / COMPLETE).exists() or not python(path).exists():
        return False
    check = subprocess.run(
        [str(python(path)), '-I', '-c', f'import {imports}'],
        capture_output=True, timeout=120, check=False)
    return check.returncode == 0


def ensure(path: pathlib.Path, requirements: Sequence[str], imports: str,
           what: str) -> pathlib.Path:
    """The environment at ``path`` with ``requirements`` (pip's
    arguments) installed, built on first use; ``imports`` says whether
    it works, ``what`` names it when it cannot be built."""
    if _works(path, imports):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f'{path.name}.lock', 'a') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not _works(path, imports):
                _build(path, requirements, what)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return path


def _build(path: pathlib.Path, requirements: Sequence[str],
           what: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
    log = path.with_name(path.name + '.log')
    started = time.monotonic()
    with open(log, 'w') as out:
        for argv in ([sys.executable, '-m', 'venv', str(path)],
                     [str(python(path)), '-m', 'pip', 'install', '-q',
                      *requirements]):
            try:
                done = subprocess.run(argv, stdout=out,
                                      stderr=subprocess.STDOUT,
                                      timeout=BUILD_TIMEOUT, check=False)
            except subprocess.TimeoutExpired:
                unavailable(what, f'{" ".join(argv[:4])} ... took over '
                                  f'{BUILD_TIMEOUT} s, see {log}')
            if done.returncode != 0:
                unavailable(what, f'{" ".join(argv[:4])} ... failed: '
                                  f'{log.read_text(errors="replace")[-800:]}')
        out.write(f'built in {time.monotonic() - started:.0f} s\n')
    # Written last: an interrupted build has none and is built again.
    (path / COMPLETE).write_text(' '.join(requirements) + '\n')
