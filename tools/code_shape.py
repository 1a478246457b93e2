"""The shape of a Python tree: its largest modules and longest functions.

Counts, for every module under a package (tests left out), its lines and
the length of each function and method (from ``def`` to its last line,
decorators and docstring included), and prints the largest of each, the
number of modules over a line limit and of functions over a length limit:

    python tools/code_shape.py cyborg --top 15

``--json PATH`` writes every module's and function's size to PATH, so two
trees (or two commits of one) can be compared.
"""
import argparse
import ast
import json
import pathlib
import sys


def _functions(tree: ast.AST, module: str) -> list[tuple[str, int]]:
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f'{prefix}{child.name}'
                start = min([child.lineno] +
                            [d.lineno for d in child.decorator_list])
                found.append((f'{module}:{name}',
                              child.end_lineno - start + 1))
                visit(child, f'{name}.')
            elif isinstance(child, ast.ClassDef):
                visit(child, f'{prefix}{child.name}.')
    visit(tree, '')
    return found


def measure(root: pathlib.Path) -> dict:
    """Lines per module and per function of every module under root."""
    modules, functions = {}, {}
    for path in sorted(root.rglob('*.py')):
        relative = path.relative_to(root.parent).as_posix()
        if '/tests/' in f'/{relative}':
            continue
        text = path.read_text(encoding='utf-8')
        modules[relative] = text.count('\n')
        functions.update(_functions(ast.parse(text), relative))
    return {'modules': modules, 'functions': functions}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('package', type=pathlib.Path)
    parser.add_argument('--top', type=int, default=10)
    parser.add_argument('--module-limit', type=int, default=400)
    parser.add_argument('--function-limit', type=int, default=50)
    parser.add_argument('--json', metavar='PATH')
    args = parser.parse_args(argv)
    shape = measure(args.package.resolve())
    modules, functions = shape['modules'], shape['functions']
    print(f'{len(modules)} modules, {sum(modules.values())} lines, '
          f'{len(functions)} functions')
    print(f'modules over {args.module_limit} lines: '
          f'{sum(n > args.module_limit for n in modules.values())}')
    print(f'functions over {args.function_limit} lines: '
          f'{sum(n > args.function_limit for n in functions.values())}')
    for title, table in (('largest modules', modules),
                         ('longest functions', functions)):
        print(f'\n{title}:')
        for name, lines in sorted(table.items(), key=lambda i: -i[1])[
                :args.top]:
            print(f'  {lines:5d}  {name}')
    if args.json:
        with open(args.json, 'w', encoding='utf-8') as out:
            json.dump(shape, out, indent=1, sort_keys=True)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
