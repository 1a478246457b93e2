"""The tables of the Accelerator Hosts panel: hosts, and a host's
devices and drivers."""
from typing import Any

from django import urls
from django.utils.translation import gettext_lazy as _
from horizon import tables

from cyborg.dashboard import api
from cyborg.dashboard.admin import common
from cyborg.dashboard.admin.accelerator_devices import tables as devices


def _detail_link(row: dict[str, Any]) -> str:
    return urls.reverse('horizon:admin:accelerator_hosts:detail',
                        args=[row['hostname']])


class HostsTable(tables.DataTable):
    """One row per compute host of ``GET /capacity?group_by=host``."""
    hostname = tables.Column('hostname', verbose_name=_('Host'),
                             link=_detail_link)
    total = tables.Column('total', verbose_name=_('Total'))
    used = tables.Column('used', verbose_name=_('Used'))
    reserved = tables.Column('reserved', verbose_name=_('Reserved'))
    unhealthy = tables.Column('unhealthy', verbose_name=_('Unhealthy'))
    available = tables.Column('available', verbose_name=_('Available'))
    health = tables.Column(common.capacity_health, verbose_name=_('Health'))

    def get_object_id(self, datum: dict[str, Any]) -> str:
        return datum['hostname']

    class Meta:
        name = 'hosts'
        verbose_name = _('Accelerator Hosts')


class HostDevicesTable(devices.DevicesTable):
    """The host's devices; the list's filter is the host itself."""

    class Meta:
        name = 'host_devices'
        verbose_name = _('Devices')
        pagination_param = 'device_marker'
        prev_pagination_param = 'device_prev_marker'
        row_actions = (devices.EnableDevice, devices.DisableDevice)


def _agent(table: tables.DataTable, request: Any) -> str:
    # The page is the compute node's; the drivers API names the agent's
    # own host, which may differ.
    return api.agent_host(request, table.kwargs['host'])


class EnableDriver(common.ApiAction):
    name = 'enable'
    verbose_name = _('Enable')
    policy_rules = common.rule('host:driver_enable')
    success = _('Enabled driver %s.')

    def allowed(self, request: Any, datum: Any) -> bool:
        return datum is not None and not datum.get('enabled')

    def call(self, table: Any, request: Any, obj_id: Any) -> None:
        api.host_driver_enable(request, _agent(table, request), obj_id)


class DisableDriver(common.ApiAction):
    name = 'disable'
    verbose_name = _('Disable')
    classes = ('btn-danger',)
    policy_rules = common.rule('host:driver_disable')
    success = _('Disabled driver %s.')

    def allowed(self, request: Any, datum: Any) -> bool:
        return datum is not None and bool(datum.get('enabled'))

    def call(self, table: Any, request: Any, obj_id: Any) -> None:
        api.host_driver_disable(request, _agent(table, request), obj_id)


class ReloadDrivers(common.ApiAction):
    name = 'reload'
    verbose_name = _('Reload Drivers')
    requires_input = False
    policy_rules = common.rule('host:driver_reload')
    success = _('Reloaded the drivers%s.')

    def call(self, table: Any, request: Any, obj_id: Any) -> None:
        api.host_drivers_reload(request, _agent(table, request))


class DriversTable(tables.DataTable):
    name = tables.Column('name', verbose_name=_('Name'))
    driver_name = tables.Column('driver_name', verbose_name=_('Driver'))
    version = tables.Column('version', verbose_name=_('Version'))
    enabled = tables.Column('enabled', verbose_name=_('Enabled'))
    state = tables.Column('state', verbose_name=_('State'))
    error = tables.Column('error', verbose_name=_('Error'))

    def get_object_id(self, datum: dict[str, Any]) -> str:
        return datum['name']

    class Meta:
        name = 'drivers'
        verbose_name = _('Drivers')
        table_actions = (ReloadDrivers,)
        row_actions = (EnableDriver, DisableDriver)
