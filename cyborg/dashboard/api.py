"""cyborg's API, called from Horizon with the logged-in user's token.

One function per call the pages make. Each takes Horizon's request (for
the token and the catalog), sends one HTTP request to the ``accelerator``
endpoint of the catalog at ``MICROVERSION``, and returns the JSON the API
answered. A 4xx or 5xx raises ``ApiError`` carrying the API's own
sentence (the ``faultstring`` of its ``error_message``), which the pages
show as it is: the API says what to fix, the dashboard does not reword it.

Lists are pages: ``Page`` holds the items and the marker of the next page,
from the API's ``next`` link; nothing here reads a whole collection.
"""
import dataclasses
import json
import logging
import urllib.parse
from typing import Any

import requests
from django.conf import settings
from openstack_dashboard.api import base

from cyborg.dashboard import conf

LOG = logging.getLogger(__name__)

# The newest version the pages use: 2.12 (capacity in pages); every
# call below exists at it. Pinned, so that a
# newer API changes nothing here until the pages are updated.
MICROVERSION = '2.12'
# Seconds for one call: a layout change waits for the agent (the API's
# own deadline is 60 s, [conductor] layout_timeout); others take
# milliseconds.
TIMEOUT = 90
# Rows a table shows a page: Horizon's API_RESULT_PAGE_SIZE when set.
DEFAULT_PAGE_SIZE = 20
# Agents read a page in the search for one by its node's name: the API's
# default [api] max_limit, so 10,000 hosts take 10 calls, not 500.
SCAN_PAGE = 1000
# The binary of the services that are agents (GET /services?binary=).
AGENT_BINARY = 'cyborg-agent'


class ApiError(Exception):
    """The API refused or failed: ``status`` and its message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclasses.dataclass
class Page:
    """One page of a list, and the marker of the next one (None: last)."""
    items: list[dict[str, Any]]
    next_marker: str | None


def page_size() -> int:
    return int(getattr(settings, 'API_RESULT_PAGE_SIZE', DEFAULT_PAGE_SIZE))


def endpoint(request: Any) -> str:
    """The API's root, without a version: the catalog may list the root
    or ``/v2`` (devstack registers ``.../accelerator/v2``)."""
    url = base.url_for(request, conf.SERVICE).rstrip('/')
    if url.endswith('/v2'):
        url = url[:-len('/v2')]
    return url


def _verify() -> bool | str:
    if getattr(settings, 'OPENSTACK_SSL_NO_VERIFY', False):
        return False
    return getattr(settings, 'OPENSTACK_SSL_CACERT', None) or True


def _message(response: requests.Response) -> str:
    """The API's sentence: ``{"error_message": "<JSON with faultstring>"}``
    (CONTRACT §0.5), else the body as text."""
    try:
        document = response.json()
        inner = document['error_message']
        if isinstance(inner, str):
            inner = json.loads(inner)
        return str(inner['faultstring'])
    except (ValueError, KeyError, TypeError):
        return response.text.strip() or response.reason


def call(request: Any, method: str, path: str,
         params: dict[str, Any] | None = None, body: Any = None,
         headers: dict[str, str] | None = None) -> Any:
    """``method`` on ``/v2/<path>`` as the user; the decoded JSON answer
    (None when there is no body)."""
    url = f'{endpoint(request)}/v2/{path}'
    sent = {'X-Auth-Token': request.user.token.id,
            'OpenStack-API-Version': f'accelerator {MICROVERSION}',
            'Accept': 'application/json'}
    sent.update(headers or {})
    query = {k: v for k, v in (params or {}).items()
             if v is not None and v != ''}
    try:
        response = requests.request(
            method, url, params=query, json=body, headers=sent,
            timeout=TIMEOUT, verify=_verify())
    except requests.RequestException as exc:
        LOG.warning('%s %s failed: %s', method, url, exc)
        raise ApiError(503, f'The accelerator service did not answer: '
                            f'{exc}') from exc
    if response.status_code >= 400:
        raise ApiError(response.status_code, _message(response))
    if not response.content:
        return None
    return response.json()


def _page(request: Any, path: str, key: str, params: dict[str, Any],
          marker: str | None, limit: int | None) -> Page:
    query = dict(params, limit=limit or page_size(), marker=marker)
    document = call(request, 'GET', path, params=query)
    following = None
    if document.get('next'):
        parsed = urllib.parse.urlparse(document['next'])
        following = urllib.parse.parse_qs(parsed.query).get(
            'marker', [None])[0]
    return Page(document[key], following)


# Devices

def devices(request: Any, marker: str | None = None,
            limit: int | None = None, hostname: str | None = None,
            type: str | None = None, health: str | None = None) -> Page:
    return _page(request, 'devices', 'devices',
                 {'hostname': hostname, 'type': type, 'health': health},
                 marker, limit)


def device(request: Any, uuid: str) -> dict[str, Any]:
    return call(request, 'GET', f'devices/{uuid}')


def device_impact(request: Any, uuid: str) -> dict[str, Any]:
    return call(request, 'GET', f'devices/{uuid}/impact')


def device_enable(request: Any, uuid: str) -> None:
    call(request, 'POST', f'devices/{uuid}/enable')


def device_disable(request: Any, uuid: str) -> None:
    call(request, 'POST', f'devices/{uuid}/disable')


def device_health_set(request: Any, uuid: str, health: str,
                      reason: str) -> dict[str, Any]:
    # The API's body names the health ``state``
    # (cyborg/api/schemas/devices.py HEALTH_SCHEMA; nothing else allowed).
    return call(request, 'PUT', f'devices/{uuid}/health',
                body={'state': health, 'reason': reason or None})


def device_health_clear(request: Any, uuid: str) -> dict[str, Any]:
    return call(request, 'DELETE', f'devices/{uuid}/health')


def device_layout(request: Any, uuid: str) -> dict[str, Any]:
    return call(request, 'GET', f'devices/{uuid}/layout')


def device_layout_set(request: Any, uuid: str,
                      layout: dict[str, Any]) -> dict[str, Any]:
    return call(request, 'PUT', f'devices/{uuid}/layout', body=layout)


def device_layout_clear(request: Any, uuid: str) -> dict[str, Any]:
    return call(request, 'DELETE', f'devices/{uuid}/layout')


# Deployables and attach handles

def deployables(request: Any, device_id: str | None = None,
                marker: str | None = None, limit: int | None = None) -> Page:
    return _page(request, 'deployables', 'deployables',
                 {'device_id': device_id}, marker, limit)


def deployable(request: Any, uuid: str) -> dict[str, Any]:
    return call(request, 'GET', f'deployables/{uuid}')


def attach_handles(request: Any, device_uuid: str | None = None,
                   clean_state: str | None = None,
                   marker: str | None = None,
                   limit: int | None = None) -> Page:
    return _page(request, 'attach_handles', 'attach_handles',
                 {'device_uuid': device_uuid, 'clean_state': clean_state},
                 marker, limit)


def attach_handle_clean(request: Any, uuid: str) -> dict[str, Any]:
    return call(request, 'POST', f'attach_handles/{uuid}/clean')


def attach_handle_release(request: Any, uuid: str) -> dict[str, Any]:
    return call(request, 'POST', f'attach_handles/{uuid}/release')


# Capacity, hosts and drivers

def capacity(request: Any, group_by: str = 'host',
             hostname: str | None = None, resource_class: str | None = None,
             type: str | None = None, marker: str | None = None,
             limit: int | None = None) -> Page:
    """A page of groups; the marker is the last group's key."""
    return _page(request, 'capacity', 'capacity', {
        'group_by': group_by, 'hostname': hostname,
        'resource_class': resource_class, 'type': type}, marker, limit)


def host_drivers(request: Any, host: str) -> list[dict[str, Any]]:
    return call(request, 'GET', f'hosts/{host}/drivers')['drivers']


def host_driver_enable(request: Any, host: str, name: str) -> Any:
    return call(request, 'POST', f'hosts/{host}/drivers/{name}/enable')


def host_driver_disable(request: Any, host: str, name: str) -> Any:
    return call(request, 'POST', f'hosts/{host}/drivers/{name}/disable')


def host_drivers_reload(request: Any, host: str) -> Any:
    return call(request, 'POST', f'hosts/{host}/drivers/reload')


def services(request: Any, marker: str | None = None,
             limit: int | None = None, binary: str | None = None,
             host: str | None = None) -> Page:
    return _page(request, 'services', 'services',
                 {'binary': binary, 'host': host}, marker, limit)


def agent_host(request: Any, hostname: str) -> str:
    """The ``[DEFAULT] host`` of the agent on compute node ``hostname``,
    the name ``/hosts/{host}/drivers`` takes; ``hostname`` itself when
    no agent reports it (the API's 404 then says so).

    The two are one name in most deployments: one call checks that.
    Where they differ (an agent whose ``host`` is set apart from the
    node's name), the agents are read a page at a time until the one on
    ``hostname`` turns up; the API filters services by ``host`` only.
    """
    if services(request, binary=AGENT_BINARY, host=hostname,
                limit=1).items:
        return hostname
    marker = None
    while True:
        page = services(request, binary=AGENT_BINARY, marker=marker,
                        limit=SCAN_PAGE)
        for service in page.items:
            if service.get('hostname') == hostname:
                return str(service['host'])
        if page.next_marker is None:
            return hostname
        marker = page.next_marker


# Device profiles and accelerator requests

def device_profiles(request: Any, marker: str | None = None,
                    limit: int | None = None,
                    name: str | None = None) -> Page:
    return _page(request, 'device_profiles', 'device_profiles',
                 {'name': name}, marker, limit)


def device_profile(request: Any, uuid: str) -> dict[str, Any]:
    return call(request, 'GET', f'device_profiles/{uuid}')


def device_profile_create(request: Any, name: str,
                          groups: list[dict[str, str]],
                          description: str | None = None,
                          is_public: bool = True) -> dict[str, Any]:
    profile: dict[str, Any] = {'name': name, 'groups': groups,
                               'is_public': is_public}
    if description:
        profile['description'] = description
    return call(request, 'POST', 'device_profiles', body=[profile])


def device_profile_delete(request: Any, uuid: str) -> None:
    call(request, 'DELETE', f'device_profiles/{uuid}')


def arqs(request: Any, instance: str | None = None,
         marker: str | None = None, limit: int | None = None) -> Page:
    return _page(request, 'accelerator_requests', 'arqs',
                 {'instance': instance}, marker, limit)


def arq(request: Any, uuid: str) -> dict[str, Any]:
    return call(request, 'GET', f'accelerator_requests/{uuid}')
