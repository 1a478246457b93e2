"""The tabs of a host's page: its devices and its drivers."""
import functools
from typing import Any

from django.utils.translation import gettext_lazy as _
from horizon import tabs
from openstack_auth import policy

from cyborg.dashboard import api
from cyborg.dashboard.admin import common
from cyborg.dashboard.admin.accelerator_hosts import tables


class DevicesTab(tabs.TableTab):
    name = _('Devices')
    slug = 'devices'
    table_classes = (tables.HostDevicesTable,)
    template_name = 'horizon/common/_detail_table.html'

    def get_host_devices_data(self) -> list[dict[str, Any]]:
        marker = self.request.GET.get(
            tables.HostDevicesTable._meta.pagination_param)
        page = common.loaded(self.request, functools.partial(
            api.devices, self.request, hostname=self.tab_group.kwargs['host'],
            marker=marker), api.Page([], None))
        self._more = page.next_marker is not None
        return page.items

    def has_more_data(self, table: Any) -> bool:
        return getattr(self, '_more', False)


class DriversTab(tabs.TableTab):
    name = _('Drivers')
    slug = 'drivers'
    table_classes = (tables.DriversTable,)
    template_name = 'horizon/common/_detail_table.html'

    def allowed(self, request: Any) -> bool:
        return policy.check(common.rule('host:driver_list'), request)

    def get_drivers_data(self) -> list[dict[str, Any]]:
        def drivers() -> list[dict[str, Any]]:
            # The page is the compute node's; the drivers API names the
            # agent's own host, which may differ.
            host = api.agent_host(self.request, self.tab_group.kwargs['host'])
            return api.host_drivers(self.request, host)

        return common.loaded(self.request, drivers, [])


class HostTabs(tabs.DetailTabsGroup):
    slug = 'host_details'
    tabs = (DevicesTab, DriversTab)
    sticky = True
