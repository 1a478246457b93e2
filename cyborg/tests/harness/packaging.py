"""cyborg's sdist and wheel, built from the tree and installed, for tests.

``build`` makes both from a copy of the tree's files (``source_files``),
so that no build output lands in the tree. ``install`` puts one of them
into a virtual environment of its own whose dependencies come from
``deps_venv``: an environment with requirements.txt and the build
requirements of pyproject.toml installed from the package index once per
machine (``cached_venv``, keyed on them and the Python version), which
the new environment reads as a site directory of its own (a .pth file).
The new environment holds exactly what pip installed from the artifact;
``run`` starts its console scripts isolated (``python -I``) from a
directory outside the tree, so that nothing is imported from the source
tree.
"""
import ast
import dataclasses
import hashlib
import pathlib
import re
import shutil
import subprocess
import sys
from typing import Any

import requests

import cyborg
from cyborg.tests.harness import cached_venv

ROOT = pathlib.Path(cyborg.__file__).resolve().parents[1]
# What a tree outside git holds besides its sources.
_BUILD_OUTPUT = re.compile(
    r'(^|/)(\.git|\.tox|\.venv|build|dist|__pycache__|[^/]*\.egg-info'
    r'|\.pytest_cache|\.ruff_cache|\.mypy_cache)(/|$)'
    r'|^(venv|state)/|\.py[cod]$|\.sqlite$')
# Seconds for building the sdist or the wheel, and for pip installing one.
BUILD_TIMEOUT = 300
# How the tests of an installed cyborg (a wheel, an sdist, an image)
# call its API: noauth's admin, at the microversion that lists services.
ADMIN = {'X-Auth-Token': 'admin',
         'OpenStack-API-Version': 'accelerator 2.5'}


def source_files(root: pathlib.Path = ROOT) -> list[str]:
    """The files a release of ``root`` is made from, relative to it: what
    git tracks or would track (not ignored), or, outside a git checkout,
    every file but build output."""
    try:
        listed = subprocess.run(
            ['git', '-C', str(root), 'ls-files', '-z', '--cached',
             '--others', '--exclude-standard'],
            capture_output=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        names = [str(path.relative_to(root))
                 for path in root.rglob('*') if path.is_file()]
        return sorted(name for name in names
                      if not _BUILD_OUTPUT.search(name))
    # A file deleted but not yet committed is listed and absent.
    return sorted(name for name in listed.decode().split('\0')
                  if name and (root / name).is_file())


@dataclasses.dataclass
class Artifacts:
    sdist: pathlib.Path
    wheel: pathlib.Path


def build(workdir: pathlib.Path, root: pathlib.Path = ROOT) -> Artifacts:
    """The sdist and the wheel of ``root``, built in ``workdir`` by the
    backend of pyproject.toml (setuptools' build_meta, in the interpreter
    that runs the tests; ``python -m build --no-isolation`` does the
    same)."""
    src = workdir / 'src'
    for name in source_files(root):
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, src / name)
    out = workdir / 'dist'
    out.mkdir()
    built = {}
    for kind in ('sdist', 'wheel'):
        done = subprocess.run(
            [sys.executable, '-I', '-c',
             'import sys\nfrom setuptools import build_meta\n'
             f'print(build_meta.build_{kind}(sys.argv[1]))', str(out)],
            cwd=src, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
        assert done.returncode == 0, (
            f'building the {kind} failed:\n{done.stdout}{done.stderr}')
        built[kind] = out / done.stdout.split()[-1]
    return Artifacts(**built)


def build_requires(root: pathlib.Path = ROOT) -> list[str]:
    """[build-system] requires of ``root``'s pyproject.toml."""
    text = (root / 'pyproject.toml').read_text()
    found = re.search(r'^\[build-system\][^[]*?^requires\s*=\s*(\[.*?\])',
                      text, re.M | re.S)
    assert found, 'pyproject.toml has no [build-system] requires'
    return list(ast.literal_eval(found.group(1)))


def deps_venv(root: pathlib.Path = ROOT) -> pathlib.Path:
    """An environment with cyborg's runtime and build requirements and
    without cyborg, built on first use (needs the package index then)."""
    requirements = (root / 'requirements.txt').read_text()
    builds = build_requires(root)
    key = hashlib.sha256('\n'.join(
        [sys.version, requirements, *builds]).encode()).hexdigest()[:16]
    path = cached_venv.cache_dir() / f'cyborg-deps-{key}'
    return cached_venv.ensure(
        path, ['-r', str(root / 'requirements.txt'), *builds],
        'oslo_messaging, pecan, pymysql, setuptools',
        "cyborg's dependencies")


def install(artifact: pathlib.Path, path: pathlib.Path,
            deps: pathlib.Path) -> pathlib.Path:
    """A new environment at ``path`` with ``artifact`` (an sdist or a
    wheel) installed by pip, without its dependencies, which the
    environment reads from ``deps``; pip builds an sdist's wheel with the
    setuptools of ``deps`` and reaches no index."""
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip',
                    str(path)], check=True, timeout=BUILD_TIMEOUT)
    # A site directory, not a plain path: the .pth files of ``deps``
    # (setuptools' distutils hook) count too.
    (cached_venv.site_packages(path) / 'cyborg_test_deps.pth').write_text(
        'import site; site.addsitedir('
        f'{str(cached_venv.site_packages(deps))!r})\n')
    done = subprocess.run(
        [str(cached_venv.python(path)), '-I', '-m', 'pip', 'install', '-q',
         '--no-deps', '--no-index', '--no-build-isolation', str(artifact)],
        cwd=path, env=cached_venv.env(), capture_output=True, text=True,
        timeout=BUILD_TIMEOUT)
    assert done.returncode == 0, (
        f'pip install {artifact.name} failed:\n{done.stdout}{done.stderr}')
    return path


def command(venv: pathlib.Path, script: str, *args: str) -> list[str]:
    """The argv of the console script ``script`` of ``venv``, isolated
    and unbuffered."""
    return [str(cached_venv.python(venv)), '-I', '-u',
            str(venv / 'bin' / script), *args]


def run(venv: pathlib.Path, cwd: pathlib.Path, script: str, *args: str,
        timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``script args`` of ``venv``, run from ``cwd``, whatever its
    outcome."""
    return subprocess.run(command(venv, script, *args), cwd=cwd,
                          env=cached_venv.env(), capture_output=True,
                          text=True, timeout=timeout, check=False)


def api_up(api: str) -> bool:
    """Whether the installed API at ``api`` answers its version."""
    try:
        return requests.get(api, timeout=2).status_code == 200
    except requests.RequestException:
        return False


def services_up(api: str) -> set[tuple[str, str]]:
    """(binary, host) of the services ``api`` lists as up."""
    answer = requests.get(f'{api}/services', headers=ADMIN, timeout=10)
    return {(s['binary'], s['host']) for s in answer.json()['services']
            if s['state'] == 'up'}


def devices(api: str, hostname: str) -> list[dict[str, Any]]:
    """The devices ``api`` lists on ``hostname``."""
    return requests.get(f'{api}/devices?hostname={hostname}',
                        headers=ADMIN, timeout=10).json()['devices']
