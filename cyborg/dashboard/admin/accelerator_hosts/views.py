"""The views of the Accelerator Hosts panel."""
import functools
from typing import Any

from django.utils.translation import gettext_lazy as _
from horizon import tables as horizon_tables
from horizon import tabs as horizon_tabs

from cyborg.dashboard import api
from cyborg.dashboard.admin import common
from cyborg.dashboard.admin.accelerator_hosts import tables
from cyborg.dashboard.admin.accelerator_hosts import tabs


class IndexView(horizon_tables.DataTableView):
    """A page of hosts from ``GET /capacity?group_by=host``: a summary row
    per host, not the devices (a host with no accelerator has no row)."""
    table_class = tables.HostsTable
    page_title = _('Accelerator Hosts')
    template_name = 'horizon/common/_data_table_view.html'

    def has_more_data(self, table: Any) -> bool:
        return getattr(self, '_more', False)

    def get_data(self) -> list[dict[str, Any]]:
        marker = self.request.GET.get(self.table._meta.pagination_param)
        page = common.loaded(self.request, functools.partial(
            api.capacity, self.request, group_by='host', marker=marker),
            api.Page([], None))
        self._more = page.next_marker is not None
        return page.items


class DetailView(horizon_tabs.TabbedTableView):
    tab_group_class = tabs.HostTabs
    template_name = 'horizon/common/_detail.html'
    page_title = '{{ host }}'

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return dict(super().get_context_data(**kwargs),
                    host=self.kwargs['host'])
