"""How tests skip: for what is missing, at test time, failing when required.

A test module that skips while it is imported (``pytest.importorskip``,
``pytest.skip(..., allow_module_level=True)``) also skips every module
that imports it, and the conftest of a directory importing it skips the
directory: one such module once hid the whole functional suite on a
machine without nova, even under CYBORG_TEST_REQUIRE_SERVICES=1.
"""
import ast
import pathlib

import pytest

from cyborg.tests import conftest

TESTS = pathlib.Path(conftest.__file__).parent
_SKIPS = frozenset({'skip', 'importorskip', 'xfail', 'exit'})
# Function bodies run at test time; everything else runs at import.
_DEFERRED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


@pytest.fixture
def required(monkeypatch):
    monkeypatch.setenv('CYBORG_TEST_REQUIRE_SERVICES', '1')


@pytest.fixture
def not_required(monkeypatch):
    monkeypatch.delenv('CYBORG_TEST_REQUIRE_SERVICES', raising=False)


def test_a_missing_module_skips(not_required):
    with pytest.raises(pytest.skip.Exception,
                       match='no_such_package_of_cyborg is not installed'):
        conftest.require_module('no_such_package_of_cyborg')


def test_a_missing_module_fails_when_required(required):
    with pytest.raises(pytest.fail.Exception,
                       match=r'no_such_package_of_cyborg is not installed '
                             r'\(test-requirements.txt\) '
                             r'\(CYBORG_TEST_REQUIRE_SERVICES=1\)'):
        conftest.require_module('no_such_package_of_cyborg')


@pytest.mark.parametrize('env', ['required', 'not_required'])
def test_an_installed_module_neither_skips_nor_fails(request, env):
    request.getfixturevalue(env)
    assert conftest.require_module('sqlalchemy') is None


def test_an_unreachable_service_skips(not_required):
    with pytest.raises(pytest.skip.Exception,
                       match='^RabbitMQ is not reachable: refused$'):
        conftest.unavailable('RabbitMQ', 'refused')


def test_an_unreachable_service_fails_when_required(required):
    with pytest.raises(pytest.fail.Exception,
                       match=r'^RabbitMQ is not reachable: refused '
                             r'\(CYBORG_TEST_REQUIRE_SERVICES=1\)$'):
        conftest.unavailable('RabbitMQ', 'refused')


def test_a_missing_command_skips(not_required):
    with pytest.raises(pytest.skip.Exception,
                       match='^uwsgi is not installed'):
        conftest.require_command('uwsgi', None)


def test_a_missing_command_fails_when_required(required):
    with pytest.raises(pytest.fail.Exception,
                       match=r'^uwsgi is not installed \(test-requirements'
                             r'.txt\) \(CYBORG_TEST_REQUIRE_SERVICES=1\)$'):
        conftest.require_command('uwsgi', None)


@pytest.mark.parametrize('env', ['required', 'not_required'])
def test_a_found_command_neither_skips_nor_fails(request, env):
    request.getfixturevalue(env)
    assert conftest.require_command('uwsgi', '/usr/bin/uwsgi') is None


def _import_time_skips(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, call) of each skip in ``tree`` that runs at import, and of
    each call asking for a module-level skip wherever it is."""
    found = []

    def visit(node: ast.AST, deferred: bool) -> None:
        if isinstance(node, ast.Call):
            name = (node.func.attr if isinstance(node.func, ast.Attribute)
                    else getattr(node.func, 'id', ''))
            module_level = any(k.arg == 'allow_module_level'
                               for k in node.keywords)
            if (name == 'importorskip' or module_level
                    or (name in _SKIPS and not deferred
                        and isinstance(node.func, ast.Attribute)
                        and getattr(node.func.value, 'id', '') == 'pytest')):
                found.append((node.lineno, ast.unparse(node.func)))
        for child in ast.iter_child_nodes(node):
            visit(child, deferred or isinstance(node, _DEFERRED))

    visit(tree, False)
    return found


def test_the_scan_finds_import_time_skips():
    tree = ast.parse(
        'import pytest\n'
        'pytest.importorskip("nova")\n'
        'if True:\n'
        '    pytest.skip("no", allow_module_level=True)\n'
        'def test_x():\n'
        '    pytest.skip("at test time")\n'
        '    pytest.importorskip("mypy")\n')
    assert _import_time_skips(tree) == [
        (2, 'pytest.importorskip'), (4, 'pytest.skip'),
        (7, 'pytest.importorskip')]


def test_no_test_module_skips_at_import():
    found = [f'{path.relative_to(TESTS)}:{line}: {call}'
             for path in sorted(TESTS.rglob('*.py'))
             for line, call in _import_time_skips(
                 ast.parse(path.read_text(), str(path)))]
    assert not found, (
        'skip at test time with conftest.require_module (a missing Python '
        'package) or conftest.unavailable (a missing service):\n'
        + '\n'.join(found))
