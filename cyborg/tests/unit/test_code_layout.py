"""architecture.rst's "Code layout" names every module of cyborg, and
only modules that exist, each under its package."""
import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[3]
LAYOUT = ROOT / 'doc' / 'source' / 'contributor' / 'architecture.rst'
START = 'Every module, with its one job'
END = 'Rules the layout keeps'


def named_in(text: str) -> set[str]:
    """The modules the layout's lists name, as paths."""
    section = text[text.index(START):text.index(END)]
    named, package = set(), None
    for line in section.splitlines():
        heading = re.fullmatch(r'``(cyborg[\w/.]*)``', line)
        item = re.match(r' {4}- ``(\w+\.py)``: \S', line)
        if heading:
            package = heading.group(1)
        elif item:
            named.add(f'{package}/{item.group(1)}')
    return named


def modules(root: pathlib.Path) -> set[str]:
    """cyborg's modules, but the tests, the migrations and packages'
    ``__init__`` holding a docstring alone."""
    found = set()
    for path in (root / 'cyborg').rglob('*.py'):
        name = path.relative_to(root).as_posix()
        if '/tests/' in name or '/alembic/versions/' in name:
            continue
        if path.name == '__init__.py' and len(
                ast.parse(path.read_text(encoding='utf-8')).body) <= 1:
            continue
        found.add(name)
    return found


def test_every_module_is_named_under_its_package():
    named = named_in(LAYOUT.read_text(encoding='utf-8'))
    actual = modules(ROOT)
    assert {'missing': sorted(actual - named),
            'gone': sorted(named - actual)} == {'missing': [], 'gone': []}


def test_the_reading_sees_headings_items_and_the_section_bounds():
    text = '\n'.join([
        '- ``outside.py``: not in the section', START, '',
        '``cyborg/agent``', '    The agent.', '',
        '    - ``cache.py``: The cache.', '    - ``manager.py``: Work.',
        '``cyborg``', '    - ``context.py``: The context.', END,
        '    - ``after.py``: not either'])
    assert named_in(text) == {'cyborg/agent/cache.py',
                              'cyborg/agent/manager.py',
                              'cyborg/context.py'}
