"""The JSON error body every client of this API parses.

``{"error_message": "<JSON of {faultcode, faultstring, debuginfo}>"}``: the
inner document is a string, as the clients (openstacksdk, tempest) expect.
"""
import json

import webob.exc


def fault(status: int, message: str) -> dict[str, object]:
    return {'faultcode': 'Client' if status < 500 else 'Server',
            'faultstring': message, 'debuginfo': None}


def fault_body(document: dict[str, object]) -> bytes:
    """The error body carrying the fault ``document``."""
    return json.dumps({'error_message': json.dumps(document)}).encode()


def error_body(status: int, message: str) -> bytes:
    return fault_body(fault(status, message))


def http_error(status: int, message: str,
               headers: dict[str, str] | None = None
               ) -> webob.exc.HTTPException:
    """A response exception carrying the JSON error body."""
    return webob.exc.status_map[status](
        body=error_body(status, message), content_type='application/json',
        charset='UTF-8', headers=headers)


def unexpected(request_id: str) -> str:
    """The message of a 500 that is a bug or an outage: the details are
    in the log, under the request id, and never in the response (they may
    hold SQL, hosts or addresses)."""
    return (f'An unexpected error occurred (request {request_id}); see '
            'the cyborg-api log.')
