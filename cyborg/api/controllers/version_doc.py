"""The version documents served at /, /v1 and /v2."""
from typing import Any

from cyborg.api import versions
from cyborg.api.controllers import link


def version_document(id_: str) -> dict[str, Any]:
    return {'id': id_, 'status': 'CURRENT',
            'min_version': versions.as_string(versions.MIN_VERSION),
            'max_version': versions.as_string(versions.MAX_VERSION),
            'links': [link.make_link('self', 'v2', '/')]}


def legacy_version_document() -> dict[str, Any]:
    """v1: deprecated, a read-only view without microversions."""
    return {'id': 'v1', 'status': 'DEPRECATED',
            'links': [link.make_link('self', 'v1', '/')]}
