"""The JSON error body every client of this API parses.

``{"error_message": "<JSON of {faultcode, faultstring, debuginfo}>"}``: the
inner document is a string, as the clients (openstacksdk, tempest) expect.
"""
import json

import webob.exc


def fault(status: int, message: str) -> dict[str, object]:
    return {'faultcode': 'Client' if status < 500 else 'Server',
            'faultstring': message, 'debuginfo': None}


def error_body(status: int, message: str) -> bytes:
    return json.dumps(
        {'error_message': json.dumps(fault(status, message))}).encode()


def http_error(status: int, message: str) -> webob.exc.HTTPException:
    """A response exception carrying the JSON error body."""
    return webob.exc.status_map[status](
        body=error_body(status, message), content_type='application/json',
        charset='UTF-8')
