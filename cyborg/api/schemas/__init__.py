"""Request validation: JSON schemas and the checks they cannot express."""
from typing import Any

import jsonschema

from cyborg.common import exception


def validate(schema: dict[str, Any], document: Any, what: str) -> None:
    """Raise Invalid (400) naming the first problem in ``document``."""
    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(document))
    if error is not None:
        where = '/'.join(str(p) for p in error.absolute_path)
        place = f' at {where}' if where else ''
        raise exception.Invalid(reason=f'{what}{place}: {error.message}')
