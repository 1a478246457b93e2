"""The operators' calls of the accelerator API, at microversion 2.5
(2.6 for device health, 2.7 for the capacity view)."""
import urllib.parse
from typing import Any

from keystoneauth1 import discover
from openstack import exceptions as sdk_exceptions
from osc_lib import exceptions

MICROVERSION = '2.5'
# Device health and the impact of taking a device out.
HEALTH_MICROVERSION = '2.6'
# GET /capacity.
CAPACITY_MICROVERSION = '2.7'


class Client:
    """Calls through the SDK's accelerator proxy (a keystoneauth adapter),
    each with ``OpenStack-API-Version: accelerator 2.5`` or the later
    microversion that its resource needs."""

    def __init__(self, proxy: Any) -> None:
        self.proxy = proxy

    def _check_version(self, microversion: str) -> None:
        data = self.proxy.get_endpoint_data()
        top = data.max_microversion if data is not None else None
        if not top or not discover.version_between(
                data.min_microversion, top, microversion):
            supported = discover.version_to_string(top) if top else 'none'
            raise exceptions.CommandError(
                f'This command needs accelerator API microversion '
                f'{microversion}; the accelerator service supports up to '
                f'{supported}.')

    def _call(self, method: str, path: str,
              microversion: str = MICROVERSION, **kwargs: Any) -> Any:
        self._check_version(microversion)
        response = self.proxy.request(path, method,
                                      microversion=microversion, **kwargs)
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

    def capacity(self, group_by: str | None = None,
                 hostname: str | None = None,
                 resource_class: str | None = None,
                 type: str | None = None) -> dict[str, Any]:
        params = {k: v for k, v in (('group_by', group_by),
                                    ('hostname', hostname),
                                    ('resource_class', resource_class),
                                    ('type', type))
                  if v is not None}
        body: dict[str, Any] = self._call(
            'GET', '/capacity', microversion=CAPACITY_MICROVERSION,
            params=params)
        return body

    def devices(self, health: str | None = None,
                hostname: str | None = None) -> list[dict[str, Any]]:
        params = {k: v for k, v in (('health', health),
                                    ('hostname', hostname))
                  if v is not None}
        found: list[dict[str, Any]] = self._call(
            'GET', '/devices', microversion=HEALTH_MICROVERSION,
            params=params)['devices']
        return found

    def set_health(self, uuid: str, state: str,
                   reason: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {'state': state}
        if reason is not None:
            body['reason'] = reason
        device: dict[str, Any] = self._call(
            'PUT', f'{_device_path(uuid)}/health',
            microversion=HEALTH_MICROVERSION, json=body)
        return device

    def clear_health(self, uuid: str) -> dict[str, Any]:
        device: dict[str, Any] = self._call(
            'DELETE', f'{_device_path(uuid)}/health',
            microversion=HEALTH_MICROVERSION)
        return device

    def impact(self, uuid: str) -> dict[str, Any]:
        found: dict[str, Any] = self._call(
            'GET', f'{_device_path(uuid)}/impact',
            microversion=HEALTH_MICROVERSION)
        return found


def _device_path(uuid: str) -> str:
    return f'/devices/{urllib.parse.quote(uuid, safe="")}'
