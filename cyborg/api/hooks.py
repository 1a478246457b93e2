"""pecan hooks: microversion negotiation and its response headers."""
import pecan
from pecan import hooks

from cyborg.api import errors
from cyborg.api import versions


class MicroversionHook(hooks.PecanHook):
    """Sets ``request.version`` on /v2 routes and echoes the headers."""

    def before(self, state: hooks.HookController) -> None:
        request = state.request
        request.version = versions.APIVersion(*versions.MIN_VERSION)
        if not _is_v2(request.path_info):
            return
        try:
            request.version = versions.parse_header(
                request.headers.get(versions.HEADER))
        except versions.InvalidVersion as exc:
            error = errors.http_error(406, str(exc))
            _add_headers(error.headers, None)
            raise error from None

    def after(self, state: hooks.HookController) -> None:
        if _is_v2(state.request.path_info):
            _add_headers(state.response.headers,
                         getattr(state.request, 'version', None))


def _is_v2(path: str) -> bool:
    return path == '/v2' or path.startswith('/v2/')


def _add_headers(headers: dict, version: versions.APIVersion | None) -> None:
    headers[versions.MIN_HEADER] = versions.as_string(versions.MIN_VERSION)
    headers[versions.MAX_HEADER] = versions.as_string(versions.MAX_VERSION)
    if version is not None:
        headers[versions.HEADER] = f'{versions.SERVICE_TYPE} {version}'
    vary = headers.get('Vary')
    if not vary:
        headers['Vary'] = versions.HEADER
    elif versions.HEADER not in vary:
        headers['Vary'] = f'{vary}, {versions.HEADER}'


def current_version() -> versions.APIVersion:
    return pecan.request.version
