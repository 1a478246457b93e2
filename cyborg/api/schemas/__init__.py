"""Request validation: JSON schemas and the checks they cannot express.

A string is bounded by what its column holds: ``column`` reads the length
from the model, so the schema and the table never disagree. Nothing here
reads the request: what a check depends on (the microversion, a limit
from the configuration) is passed in by the controller.
"""
import uuid as uuid_lib
from typing import Any

import jsonschema
from oslo_utils import uuidutils

from cyborg.common import exception
from cyborg.db.api import query

# Characters shown of a bad value in an error message.
SHOWN = 64
# Items one request may name, in a comma-separated query parameter or as
# the keys of a body.
LIST_MAX = 1000


def _cut(text: str, most: int = SHOWN) -> str:
    return text if len(text) <= most else text[:most - 3] + '...'


def shown(value: Any) -> str:
    """``repr(value)``, cut short for an error message."""
    return _cut(repr(value))


def canonical_uuid(value: Any) -> str | None:
    """``value`` as a uuid in the one form stored and shown (lower case,
    with dashes), from any form oslo accepts ("{...}", "urn:uuid:...",
    upper case, without dashes); None if it is no uuid."""
    if not isinstance(value, str) or not uuidutils.is_uuid_like(value):
        return None
    return str(uuid_lib.UUID(value))


def check_uuid(value: Any, what: str) -> str:
    """The canonical form of a uuid sent in a body or query; Invalid if
    it is none."""
    canonical = canonical_uuid(value)
    if canonical is None:
        raise exception.Invalid(reason=f'{what} must be a UUID, not '
                                       f'{shown(value)}.')
    return canonical


def legacy_error(message: str, strict: bool) -> exception.CyborgException:
    """400 when ``strict`` (microversion 2.4 and later); 500 before, as
    the clients of 2.0-2.3 expect."""
    if strict:
        return exception.Invalid(reason=message)
    return exception.LegacyServerError(reason=message)


def column(col: Any, null: bool = False, **extra: Any) -> dict[str, Any]:
    """The schema of a string that ``col`` holds: at most its length in
    characters, or for a Text column its size in bytes of UTF-8."""
    schema: dict[str, Any] = {'type': ['string', 'null'] if null
                              else 'string', **extra}
    chars, size = query.max_chars(col), query.max_bytes(col)
    if chars is not None:
        schema['maxLength'] = min(chars, schema.get('maxLength', chars))
    if size is not None:
        schema['maxBytes'] = size
    return schema


def integer(col: Any, minimum: int = 1) -> dict[str, Any]:
    """The schema of an integer that ``col`` holds (ids start at 1)."""
    return {'type': 'integer', 'minimum': minimum,
            'maximum': query.integer_range(col)[1]}


def _max_bytes(validator: Any, limit: int, instance: Any,
               schema: dict[str, Any]) -> Any:
    if (isinstance(instance, str)
            and len(instance.encode('utf-8', 'surrogatepass')) > limit):
        yield jsonschema.ValidationError(
            f'is longer than {limit} bytes in UTF-8')


def _is_integer(checker: Any, instance: Any) -> bool:
    # JSON Schema counts 1.0 as an integer, Python True as none; a count
    # or an id is sent as a JSON integer, and taken as it was sent.
    return isinstance(instance, int) and not isinstance(instance, bool)


_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    validators={'maxBytes': _max_bytes},
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        'integer', _is_integer))


def _message(error: jsonschema.ValidationError) -> str:
    """What is wrong, naming the limit, without echoing a long value."""
    kind, limit = error.validator, error.validator_value
    if kind == 'maxLength':
        return f'is longer than {limit} characters'
    if kind == 'minLength':
        return f'has fewer than {limit} characters'
    if kind in ('maximum', 'minimum'):
        bound = 'at most' if kind == 'maximum' else 'at least'
        return f'must be {bound} {limit}, not {shown(error.instance)}'
    if kind == 'maxItems':
        return f'has more than {limit} items'
    if kind == 'maxProperties':
        return f'has more than {limit} keys'
    if kind == 'type':
        return f'{shown(error.instance)} is not of type {limit}'
    if kind in ('enum', 'const'):
        return f'{shown(error.instance)} is not one of {limit}'
    return _cut(error.message, 4 * SHOWN)


def validate(schema: dict[str, Any], document: Any, what: str) -> None:
    """Raise Invalid (400) naming the first problem in ``document``.

    Beyond JSON Schema: ``integer`` means a JSON integer (not 1.0), and
    ``maxBytes`` bounds a string's size in UTF-8.
    """
    error = jsonschema.exceptions.best_match(
        _Validator(schema).iter_errors(document))
    if error is not None:
        where = '/'.join(_cut(str(p)) for p in error.absolute_path)
        place = f' at {where}' if where else ''
        raise exception.Invalid(reason=f'{what}{place}: {_message(error)}')
