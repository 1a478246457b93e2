"""The Containerfile against setup.cfg and the tree, without building it
(functional/test_container_image.py builds and runs it: tox -e images).

What a build would only show minutes later: the files it copies from the
tree exist and .containerignore keeps them, as it keeps every file the
wheel is built from (a new pattern there would drop a data file from the
image and from nothing else); the dependencies it installs are the file
setup.cfg names; and its default command lists setup.cfg's console
scripts.
"""
import configparser
import json
import re
import subprocess
import sys

from cyborg.tests.harness import packaging

ROOT = packaging.ROOT
CONTAINERFILE = ROOT / 'Containerfile'


def _setup() -> configparser.ConfigParser:
    setup = configparser.ConfigParser()
    setup.read(ROOT / 'setup.cfg')
    return setup


def _instructions() -> list[tuple[str, str]]:
    """(instruction, arguments), continuation lines joined, comments out."""
    text = re.sub(r'\\\n', ' ', '\n'.join(
        line for line in CONTAINERFILE.read_text().splitlines()
        if not line.lstrip().startswith('#')))
    found = []
    for line in text.splitlines():
        if line.strip():
            keyword, _, rest = line.strip().partition(' ')
            found.append((keyword.upper(), rest.strip()))
    return found


def _pattern(line: str) -> re.Pattern[str]:
    """A .containerignore line as a regular expression over paths
    relative to the context: ``**`` any number of directories, ``*`` and
    ``?`` within one name, and a match of a directory takes what is
    under it (moby's patternmatcher, which podman's buildah follows:
    containerignore(5))."""
    out = ''
    rest = line.strip('/')
    while rest:
        if rest.startswith('**/'):
            out, rest = out + '(?:.*/)?', rest[3:]
        elif rest.startswith('**'):
            out, rest = out + '.*', rest[2:]
        elif rest[0] == '*':
            out, rest = out + '[^/]*', rest[1:]
        elif rest[0] == '?':
            out, rest = out + '[^/]', rest[1:]
        else:
            out, rest = out + re.escape(rest[0]), rest[1:]
    return re.compile(out + '(?:/.*)?')


def _ignored(paths: list[str]) -> set[str]:
    """The ``paths`` that .containerignore leaves out of the context (the
    last matching line decides; ``!`` takes back)."""
    rules = []
    for line in (ROOT / '.containerignore').read_text().splitlines():
        line = line.strip()
        if line and not line.startswith('#'):
            keep = line.startswith('!')
            rules.append((keep, _pattern(line.lstrip('!'))))
    ignored = set()
    for path in paths:
        verdict = False
        for keep, pattern in rules:
            if pattern.fullmatch(path):
                verdict = not keep
        if verdict:
            ignored.add(path)
    return ignored


def test_the_ignore_patterns_read_as_buildah_does():
    assert _ignored(['.git/config', '.gitignore', 'cyborg/a.pyc',
                     'cyborg/x/__pycache__/m.cpython-311.pyc', 'build/lib/x',
                     'cyborg/build.py', 'doc/build/html/index.html']) == {
        '.git/config', 'cyborg/a.pyc',
        'cyborg/x/__pycache__/m.cpython-311.pyc', 'build/lib/x',
        'doc/build/html/index.html'}


def test_the_context_keeps_what_the_wheel_is_built_from():
    tree = packaging.source_files()
    needed = [name for name in tree if name.startswith('cyborg/')] + [
        'setup.cfg', 'setup.py', 'pyproject.toml', 'MANIFEST.in',
        'README.md', 'requirements.txt']
    assert not sorted(_ignored(needed))
    for keyword, args in _instructions():
        if keyword == 'COPY' and not args.startswith('--from'):
            source = args.split()[0]
            assert source == '.' or (ROOT / source).exists(), args
            assert not _ignored([source]), args


def test_the_dependencies_are_those_setup_cfg_names():
    install_requires = _setup().get('options', 'install_requires')
    assert install_requires == 'file: requirements.txt'
    copies = [args for keyword, args in _instructions()
              if keyword == 'COPY' and args.startswith('requirements.txt ')]
    target = copies[0].split()[1]
    assert [args for keyword, args in _instructions() if keyword == 'RUN'
            and f'pip install -r {target}' in args], _instructions()


def test_the_default_command_lists_the_console_scripts():
    cmd = json.loads(dict(_instructions())['CMD'])
    assert cmd[:2] == ['python3', '-c'], cmd
    # Run against this environment's cyborg, which is installed from the
    # same setup.cfg.
    listed = subprocess.run([sys.executable, '-c', cmd[2]],
                            capture_output=True, text=True, check=True,
                            timeout=60).stdout.splitlines()
    scripts = {line.split('=')[0].strip() for line in _setup().get(
        'options.entry_points', 'console_scripts').splitlines() if line}
    assert {line.strip() for line in listed[1:]} == scripts, listed
