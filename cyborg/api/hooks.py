"""pecan hooks: configuration, request context, conductor client and
microversions."""
import threading
from collections.abc import Callable
from typing import Generic
from typing import TypeVar

from oslo_config import cfg
from pecan import hooks

from cyborg import context as cyborg_context
from cyborg.api import errors
from cyborg.api import policy
from cyborg.api import versions
from cyborg.conductor import rpc_batching
from cyborg.conductor import rpcapi as conductor_rpcapi


class ConfigHook(hooks.PecanHook):
    """Gives controllers ``request.conf``, the configuration the app was
    built with, and ``request.enforcer``, the policy enforcer built from
    it: two apps of one process each serve with their own."""

    def __init__(self, conf: cfg.ConfigOpts,
                 enforcer: policy.Enforcer) -> None:
        self.conf = conf
        self.enforcer = enforcer

    def before(self, state: hooks.HookController) -> None:
        state.request.conf = self.conf
        state.request.enforcer = self.enforcer


class ContextHook(hooks.PecanHook):
    """Builds ``request.context`` from the headers auth middleware set."""

    def before(self, state: hooks.HookController) -> None:
        context = cyborg_context.RequestContext.from_environ(
            state.request.environ)
        context.is_admin = 'admin' in (context.roles or [])
        state.request.context = context


Made = TypeVar('Made')


class _Lazy(Generic[Made]):
    """An object made on the first use of one of its attributes: reads
    and version documents need no message transport."""

    def __init__(self, make: Callable[[], Made]) -> None:
        self._make = make
        self._made: Made | None = None
        self._lock = threading.Lock()

    def get(self) -> Made:
        if self._made is None:
            with self._lock:
                if self._made is None:
                    self._made = self._make()
        return self._made

    def __getattr__(self, name: str) -> object:
        return getattr(self.get(), name)


class ConductorHook(hooks.PecanHook):
    """Gives controllers ``request.conductor_api``, the conductor client,
    and ``request.arq_writes``, its writes on accelerator requests joined
    into batch calls (``rpc_batching``)."""

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self.api = _Lazy(lambda: conductor_rpcapi.ConductorAPI(conf))
        # One client per process: concurrent writes share its batches.
        self.arq_writes = _Lazy(lambda: rpc_batching.BatchedWrites(
            self.api.get(), create_batch=conf.api.create_batch_size,
            bind_batch=conf.api.bind_batch_size))

    def before(self, state: hooks.HookController) -> None:
        state.request.conductor_api = self.api
        state.request.arq_writes = self.arq_writes


class MicroversionHook(hooks.PecanHook):
    """Sets ``request.version`` on /v2 routes and echoes the headers."""

    def before(self, state: hooks.HookController) -> None:
        request = state.request
        request.version = versions.APIVersion(*versions.MIN_VERSION)
        if not _is_v2(request.path_info):
            return
        try:
            request.version = versions.requested(request.environ)
        except versions.InvalidVersion as exc:
            # No version is served: the reply gives the range, not one.
            request.version_rejected = True
            error = errors.http_error(406, str(exc))
            _add_headers(error.headers, None)
            raise error from None

    def after(self, state: hooks.HookController) -> None:
        request = state.request
        if _is_v2(request.path_info):
            served = (None if getattr(request, 'version_rejected', False)
                      else getattr(request, 'version', None))
            _add_headers(state.response.headers, served)


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
