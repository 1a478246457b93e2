"""The layout cyborg/tests/README sets: harness modules hold no test and
import no test module, and the tests root holds only what pytest reads."""
import ast
import pathlib

TESTS = pathlib.Path(__file__).resolve().parents[1]


def _imported(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f'{node.module}.{alias.name}'
                         for alias in node.names)
    return names


def _offences(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding='utf-8'))
    found = [f'imports {name}' for name in sorted(_imported(tree))
             if name.rsplit('.', 1)[-1].startswith('test_')]
    found += [f'defines {node.name}' for node in ast.walk(tree)
              if isinstance(node, (ast.FunctionDef, ast.ClassDef))
              and node.name.lower().startswith('test')]
    return found


def test_harness_modules_hold_no_test_and_import_none():
    offences = {path.name: _offences(path)
                for path in sorted((TESTS / 'harness').glob('*.py'))}
    assert {name: found for name, found in offences.items() if found} == {}


def test_the_check_sees_a_test_and_an_imported_test_module(tmp_path):
    module = tmp_path / 'stack.py'
    module.write_text('from cyborg.tests.functional import test_gate\n'
                      'def test_it():\n    pass\n')
    assert _offences(module) == [
        'imports cyborg.tests.functional.test_gate', 'defines test_it']


def test_the_tests_root_holds_only_what_pytest_reads():
    assert sorted(p.name for p in TESTS.glob('*.py')) == [
        '__init__.py', 'conftest.py', 'utils.py']
