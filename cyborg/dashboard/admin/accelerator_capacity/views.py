"""The view of the Accelerator Capacity panel: three charts, one
``GET /capacity`` each, of one page of groups."""
import functools
import urllib.parse
from typing import Any

from django import urls
from django.utils.translation import gettext_lazy as _
from horizon import views

from cyborg.dashboard import api
from cyborg.dashboard.admin import common
from cyborg.dashboard.admin.accelerator_capacity import charts

# The API's group_by values, the key of each row, and the chart's title.
GROUPINGS = (('resource_class', 'resource_class', _('Per resource class')),
             ('host', 'hostname', _('Per host')),
             ('trait', 'trait', _('Per trait')))


class IndexView(views.HorizonTemplateView):
    template_name = 'accelerators/admin/accelerator_capacity/index.html'
    page_title = _('Accelerator Capacity')

    def _chart(self, group_by: str, key: str, title: str) -> dict[str, Any]:
        # Hosts may be thousands: one table page of them, and the next
        # in the hosts panel. Resource classes and traits are few: one
        # page of the API's default [api] max_limit holds them.
        limit = api.page_size() if group_by == 'host' else api.SCAN_PAGE
        page = common.loaded(self.request, functools.partial(
            api.capacity, self.request, group_by=group_by, limit=limit),
            api.Page([], None))
        chart = {'group_by': group_by, 'title': title,
                 'bars': charts.bars(page.items, key), 'more': None}
        if page.next_marker is not None:
            chart['more'] = (
                urls.reverse('horizon:admin:accelerator_hosts:index')
                + '?' + urllib.parse.urlencode(
                    {'marker': page.next_marker})
                if group_by == 'host' else '')
        return chart

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context['charts'] = [self._chart(group_by, key, title)
                             for group_by, key, title in GROUPINGS]
        context['segments'] = charts.SEGMENTS
        return context
