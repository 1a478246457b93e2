"""The operators' calls of the accelerator API, at microversion 2.5."""
import urllib.parse
from typing import Any

from keystoneauth1 import discover
from openstack import exceptions as sdk_exceptions
from osc_lib import exceptions

MICROVERSION = '2.5'


class Client:
    """Calls through the SDK's accelerator proxy (a keystoneauth adapter),
    each with ``OpenStack-API-Version: accelerator 2.5``."""

    def __init__(self, proxy: Any) -> None:
        self.proxy = proxy

    def _check_version(self) -> None:
        data = self.proxy.get_endpoint_data()
        top = data.max_microversion if data is not None else None
        if not top or not discover.version_between(
                data.min_microversion, top, MICROVERSION):
            supported = discover.version_to_string(top) if top else 'none'
            raise exceptions.CommandError(
                f'This command needs accelerator API microversion '
                f'{MICROVERSION}; the accelerator service supports up to '
                f'{supported}.')

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        self._check_version()
        response = self.proxy.request(path, method,
                                      microversion=MICROVERSION, **kwargs)
        try:
            sdk_exceptions.raise_from_response(response)
        except sdk_exceptions.HttpException as exc:
            raise exceptions.CommandError(
                f'{exc.status_code}: {exc.details}') from None
        return response.json()

    def services(self, binary: str | None = None, host: str | None = None,
                 limit: int | None = None, marker: int | None = None
                 ) -> list[dict[str, Any]]:
        params = {k: v for k, v in (('binary', binary), ('host', host),
                                    ('limit', limit), ('marker', marker))
                  if v is not None}
        return self._call('GET', '/services', params=params)['services']

    def drivers(self, host: str | None = None,
                driver_name: str | None = None,
                state: str | None = None) -> list[dict[str, Any]]:
        params = {k: v for k, v in (('host', host),
                                    ('driver_name', driver_name),
                                    ('state', state))
                  if v is not None}
        return self._call('GET', '/drivers', params=params)['drivers']

    def discover(self, host: str) -> dict[str, Any]:
        return self._call(
            'POST', f'/hosts/{urllib.parse.quote(host, safe="")}/discover')
