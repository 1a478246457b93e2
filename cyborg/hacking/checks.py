"""Local flake8 checks (C3xx) for rules that ruff cannot express.

Each check is a plain function that flake8 calls once per logical line;
it yields ``(offset, message)`` for every offence, where ``offset`` is a
column in the logical line. The functions are registered in ``tox.ini``
under ``[flake8:local-plugins]``.

flake8 replaces the contents of string literals with ``x`` before it
hands a logical line to a check; the checks also blank out literals
themselves, so they give the same answer on raw source lines.

* C301: no ``import eventlet`` / ``from eventlet ...``; cyborg runs on
  native threads.
* C302: log calls take their arguments lazily, ``LOG.info(msg, arg)``;
  ``LOG.info(msg % arg)`` formats even when the level is disabled.
* C303: ``raise e`` as the whole body of ``except ... as e:`` adds nothing;
  let the exception propagate, or use a bare ``raise`` after handling it.
"""
import re
from collections.abc import Iterator

C301 = 'C301: eventlet is not allowed; cyborg runs on native threads.'
C302 = ('C302: pass log message arguments lazily, LOG.x(msg, arg), not '
        'LOG.x(msg % arg).')
C303 = ('C303: do not catch an exception only to raise it again; let it '
        'propagate, or use a bare "raise".')

_IMPORT_EVENTLET = re.compile(
    r'^\s*(?:import\s+(?:[\w.]+(?:\s+as\s+\w+)?\s*,\s*)*'
    r'|from\s+)(?P<module>eventlet)\b(?!\w)')

# A string literal with an optional prefix; the contents of triple-quoted
# literals may span lines inside one logical line.
_STRING = re.compile(
    r'(?<![\w])[rRbBuUfF]{0,2}'
    r'(?:"""(?:\\.|[^\\])*?"""|\'\'\'(?:\\.|[^\\])*?\'\'\''
    r'|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\')',
    re.DOTALL)

_LOG_CALL = re.compile(
    r'\bLOG\.(?:debug|info|warning|warn|error|exception|critical|fatal)'
    r'\s*\(')

_EXCEPT_AS = re.compile(r'^\s*except\b.*\bas\s+(?P<name>\w+)\s*:')
_RAISE_NAME = re.compile(r'^\s*(?P<raise>raise)\s+(?P<name>\w+)\s*$')
_OPENERS = '([{'
_CLOSERS = ')]}'


def _blank_strings(line: str) -> str:
    """``line`` with every string literal replaced by as many ``x``.

    Offsets stay the same, and nothing inside a literal (``%``, commas,
    brackets) can be mistaken for code.
    """
    return _STRING.sub(lambda m: 'x' * len(m.group(0)), line)


def check_no_eventlet(logical_line: str) -> Iterator[tuple[int, str]]:
    """C301: eventlet must never be imported."""
    match = _IMPORT_EVENTLET.match(logical_line)
    if match:
        yield match.start('module'), C301


def _eager_percent(code: str, start: int) -> int | None:
    """Offset of a ``%`` at the top level of the call's first argument.

    ``start`` is just after the call's opening parenthesis.
    """
    depth = 0
    for pos in range(start, len(code)):
        char = code[pos]
        if char in _OPENERS:
            depth += 1
        elif char in _CLOSERS:
            if depth == 0:
                return None
            depth -= 1
        elif depth == 0:
            if char == ',':
                return None
            if char == '%' and code[pos + 1:pos + 2] != '=':
                return pos
    return None


def check_lazy_log_args(logical_line: str) -> Iterator[tuple[int, str]]:
    """C302: no ``%`` formatting of a log message before the call."""
    if 'LOG.' not in logical_line:
        return
    code = _blank_strings(logical_line)
    for call in _LOG_CALL.finditer(code):
        offset = _eager_percent(code, call.end())
        if offset is not None:
            yield offset, C302


def check_raise_caught(logical_line: str, previous_logical: str
                       ) -> Iterator[tuple[int, str]]:
    """C303: ``except ... as e:`` whose first statement is ``raise e``.

    Both spellings are caught: the handler on one line
    (``except E as e: raise e``) and ``raise e`` as the first logical line
    after ``except E as e:``. A handler that does something before
    raising is left alone.
    """
    code = _blank_strings(logical_line)
    handler = _EXCEPT_AS.match(code)
    if handler:
        # The whole handler on one line: "except E as e: raise e".
        raised = _RAISE_NAME.match(code[handler.end():])
        if raised and raised.group('name') == handler.group('name'):
            yield handler.end() + raised.start('raise'), C303
        return
    raised = _RAISE_NAME.match(code)
    if not raised:
        return
    previous = _blank_strings(previous_logical or '')
    handler = _EXCEPT_AS.match(previous)
    if (handler and not previous[handler.end():].strip()
            and handler.group('name') == raised.group('name')):
        yield raised.start('raise'), C303
