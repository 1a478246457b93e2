"""The views of the Accelerator Devices panel."""
import functools
from typing import Any

from django import http
from django import shortcuts
from django import urls
from django.contrib import messages
from django.utils.translation import gettext_lazy as _
from django.views import generic
from horizon import forms
from horizon import tables as horizon_tables
from horizon import tabs as horizon_tabs

from cyborg.dashboard import api
from cyborg.dashboard import errors
from cyborg.dashboard.admin import common
from cyborg.dashboard.admin.accelerator_devices import forms as device_forms
from cyborg.dashboard.admin.accelerator_devices import tables
from cyborg.dashboard.admin.accelerator_devices import tabs

INDEX_URL = 'horizon:admin:accelerator_devices:index'
TEMPLATES = 'accelerators/admin/accelerator_devices/'


class IndexView(horizon_tables.DataTableView):
    table_class = tables.DevicesTable
    page_title = _('Accelerator Devices')
    template_name = 'horizon/common/_data_table_view.html'

    def has_more_data(self, table: Any) -> bool:
        return getattr(self, '_more', False)

    def get_data(self) -> list[dict[str, Any]]:
        marker = self.request.GET.get(self.table._meta.pagination_param)
        filters = self.get_filters()
        page = common.loaded(self.request, functools.partial(
            api.devices, self.request, marker=marker, **filters),
            api.Page([], None))
        self._more = page.next_marker is not None
        return page.items


def read_device(request: Any, uuid: str) -> dict[str, Any]:
    """The device, or back to the list with the API's message."""
    try:
        return api.device(request, uuid)
    except api.ApiError as exc:
        errors.show(request, exc, redirect=urls.reverse(INDEX_URL))
        raise


class DetailView(horizon_tabs.TabbedTableView):
    tab_group_class = tabs.DeviceTabs
    template_name = 'horizon/common/_detail.html'
    page_title = '{{ device.uuid }}'

    def get_device(self) -> dict[str, Any]:
        if not hasattr(self, '_device'):
            self._device = read_device(self.request, self.kwargs['uuid'])
        return self._device

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        device = self.get_device()
        context['device'] = device
        context['url'] = urls.reverse(INDEX_URL)
        table = tables.DevicesTable(self.request)
        context['actions'] = table.render_row_actions(device)
        return context

    def get_tabs(self, request: Any, *args: Any,
                 **kwargs: Any) -> horizon_tabs.TabGroup:
        return self.tab_group_class(request, device=self.get_device(),
                                    **kwargs)


class DeviceFormView(forms.ModalFormView):
    """A modal form about one device; back to its page when done."""

    def get_success_url(self) -> str:
        return device_forms.detail_url(self.kwargs['uuid'])

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context['submit_url'] = urls.reverse(self.submit_url_name,
                                             args=[self.kwargs['uuid']])
        context['cancel_url'] = self.get_success_url()
        return context

    def get_form_kwargs(self) -> dict[str, Any]:
        return dict(super().get_form_kwargs(), uuid=self.kwargs['uuid'])


class LayoutView(DeviceFormView):
    form_class = device_forms.LayoutForm
    template_name = TEMPLATES + 'layout_form.html'
    modal_id = 'device_layout_modal'
    page_title = _('Set the Layout')
    submit_label = _('Apply')
    submit_url_name = 'horizon:admin:accelerator_devices:layout'

    def get_layout(self) -> dict[str, Any]:
        """What the device's agent offers; its refusal sends the user
        back to the device with the API's message."""
        if not hasattr(self, '_layout'):
            try:
                self._layout = api.device_layout(self.request,
                                                 self.kwargs['uuid'])
            except api.ApiError as exc:
                errors.show(self.request, exc,
                            redirect=self.get_success_url())
                raise
        return self._layout

    def get_form_kwargs(self) -> dict[str, Any]:
        return dict(super().get_form_kwargs(),
                    options=self.get_layout().get('options') or {})

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        return dict(super().get_context_data(**kwargs),
                    layout=self.get_layout())


class HealthView(DeviceFormView):
    form_class = device_forms.HealthForm
    template_name = TEMPLATES + 'health_form.html'
    modal_id = 'device_health_modal'
    page_title = _('Set the Health')
    submit_label = _('Set')
    submit_url_name = 'horizon:admin:accelerator_devices:health'

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        # The impact before the change: what setting it unhealthy would
        # take out of scheduling.
        impact = common.loaded(self.request, functools.partial(
            api.device_impact, self.request, self.kwargs['uuid']), None)
        return dict(super().get_context_data(**kwargs), impact=impact)

    def get_initial(self) -> dict[str, Any]:
        return {'health': 'unhealthy'}


class HealthClearView(generic.View):
    """``DELETE /devices/{uuid}/health`` from the Health tab's button:
    the agent's last reading counts again."""
    http_method_names = ['post']

    def post(self, request: Any, uuid: str) -> http.HttpResponse:
        try:
            device = api.device_health_clear(request, uuid)
        except api.ApiError as exc:
            errors.show(request, exc)
        else:
            messages.success(request, _(
                "Cleared the operator's health of %(uuid)s; it is "
                "%(health)s as its agent reads it.") % {
                    'uuid': uuid, 'health': device.get('health')})
        return shortcuts.redirect(device_forms.detail_url(uuid)
                                  + '?tab=device_details__health')
