"""The Accelerator Requests panel's pages: the list and one request."""
from typing import Any

from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from horizon import tables
from horizon import views
from horizon.utils import filters

from cyborg.dashboard import api
from cyborg.dashboard import errors
from cyborg.dashboard.project import common
from cyborg.dashboard.project.accelerator_requests import tables as arq_tables

TEMPLATES = 'accelerators/project/accelerator_requests'


class IndexView(common.MarkerPagedViewMixin, tables.DataTableView):
    table_class = arq_tables.AcceleratorRequestsTable
    template_name = f'{TEMPLATES}/index.html'
    page_title = _('Accelerator Requests')

    def get_data(self) -> list[dict[str, Any]]:
        try:
            return self.page_items(api.arqs(
                self.request, instance=self.server_filter(),
                marker=self.marker()))
        except api.ApiError as exc:
            errors.show(self.request, exc)
            return []


class DetailView(views.HorizonTemplateView):
    template_name = f'{TEMPLATES}/detail.html'
    page_title = _('Accelerator Request {{ arq.uuid }}')

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        index = reverse('horizon:project:accelerator_requests:index')
        try:
            arq = api.arq(self.request, kwargs['uuid'])
        except api.ApiError as exc:
            errors.show(self.request, exc, redirect=index)
        context.update(
            arq=arq, url=index,
            profile_group=arq_tables.profile_group(arq),
            instance_url=arq_tables.instance_url(arq),
            handle_info=sorted((arq.get('attach_handle_info') or {}).items()),
            created=filters.parse_isotime(arq['created_at']),
            updated=filters.parse_isotime(arq['updated_at']))
        return context
