"""The operators' calls of the accelerator API, at microversion 2.5
(2.6 for device health, 2.7 for the capacity view, 2.8 for the device
lifecycle, 2.10 for private device profiles)."""
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
# The device lifecycle: attach handles and their cleaning, layouts, drivers
# per host.
LIFECYCLE_MICROVERSION = '2.8'
# Private device profiles: is_public and the projects of a profile.
PRIVATE_PROFILES_MICROVERSION = '2.10'


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
        # A 204 has no body.
        return response.json() if response.content else None

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

    def host_drivers(self, host: str) -> list[dict[str, Any]]:
        """The drivers installed on ``host``, from its agent (2.8)."""
        found: list[dict[str, Any]] = self._call(
            'GET', f'{_host_path(host)}/drivers',
            microversion=LIFECYCLE_MICROVERSION)['drivers']
        return found

    def host_driver_set_enabled(self, host: str, name: str,
                                enabled: bool) -> dict[str, Any]:
        action = 'enable' if enabled else 'disable'
        driver: dict[str, Any] = self._call(
            'POST', f'{_host_path(host)}/drivers/'
                    f'{urllib.parse.quote(name, safe="")}/{action}',
            microversion=LIFECYCLE_MICROVERSION)
        return driver

    def host_drivers_reload(self, host: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self._call(
            'POST', f'{_host_path(host)}/drivers/reload',
            microversion=LIFECYCLE_MICROVERSION)['drivers']
        return found

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

    def layout(self, uuid: str) -> dict[str, Any]:
        """The device's desired layout, its state, and what its agent
        offers (2.8)."""
        found: dict[str, Any] = self._call(
            'GET', f'{_device_path(uuid)}/layout',
            microversion=LIFECYCLE_MICROVERSION)
        return found

    def set_layout(self, uuid: str, layout: dict[str, Any]
                   ) -> dict[str, Any]:
        device: dict[str, Any] = self._call(
            'PUT', f'{_device_path(uuid)}/layout',
            microversion=LIFECYCLE_MICROVERSION, json=layout)
        return device

    def clear_layout(self, uuid: str) -> dict[str, Any]:
        device: dict[str, Any] = self._call(
            'DELETE', f'{_device_path(uuid)}/layout',
            microversion=LIFECYCLE_MICROVERSION)
        return device

    def attach_handles(self, device_uuid: str | None = None,
                       clean_state: str | None = None
                       ) -> list[dict[str, Any]]:
        params = {k: v for k, v in (('device_uuid', device_uuid),
                                    ('clean_state', clean_state))
                  if v is not None}
        found: list[dict[str, Any]] = self._call(
            'GET', '/attach_handles', microversion=LIFECYCLE_MICROVERSION,
            params=params)['attach_handles']
        return found

    def attach_handle_action(self, uuid: str, action: str
                             ) -> dict[str, Any]:
        """POST /attach_handles/{uuid}/clean or .../release."""
        handle: dict[str, Any] = self._call(
            'POST', f'/attach_handles/{urllib.parse.quote(uuid, safe="")}'
                    f'/{action}', microversion=LIFECYCLE_MICROVERSION)
        return handle


    def device_profile(self, profile: str) -> dict[str, Any]:
        """The profile of a name or uuid, with ``is_public`` (2.10)."""
        found: dict[str, Any] = self._call(
            'GET', _profile_path(profile),
            microversion=PRIVATE_PROFILES_MICROVERSION)['device_profile']
        return found

    def device_profile_projects(self, profile: str) -> list[str]:
        """The projects of the profile's access list (2.10)."""
        found: list[str] = self._call(
            'GET', f'{_profile_path(profile)}/projects',
            microversion=PRIVATE_PROFILES_MICROVERSION)['projects']
        return found

    def set_device_profile_public(self, profile: str, is_public: bool
                                  ) -> dict[str, Any]:
        """Make the profile public or private (2.10); the profile."""
        changed: dict[str, Any] = self._call(
            'PATCH', _profile_path(profile),
            microversion=PRIVATE_PROFILES_MICROVERSION,
            json=[{'op': 'replace', 'path': '/is_public',
                   'value': is_public}])
        return changed

    def add_device_profile_project(self, profile: str,
                                   project: str) -> None:
        self._call('PUT', _project_path(profile, project),
                   microversion=PRIVATE_PROFILES_MICROVERSION)

    def remove_device_profile_project(self, profile: str,
                                      project: str) -> None:
        self._call('DELETE', _project_path(profile, project),
                   microversion=PRIVATE_PROFILES_MICROVERSION)


def _profile_path(profile: str) -> str:
    return f'/device_profiles/{urllib.parse.quote(profile, safe="")}'


def _project_path(profile: str, project: str) -> str:
    return (f'{_profile_path(profile)}/projects/'
            f'{urllib.parse.quote(project, safe="")}')


def _host_path(host: str) -> str:
    return f'/hosts/{urllib.parse.quote(host, safe="")}'


def _device_path(uuid: str) -> str:
    return f'/devices/{urllib.parse.quote(uuid, safe="")}'
