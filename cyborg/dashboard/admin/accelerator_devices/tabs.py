"""The tabs of a device's page: overview, deployables, attach handles,
layout and health."""
import functools
from typing import Any

from django.middleware import csrf
from django.utils.translation import gettext_lazy as _
from horizon import tabs
from openstack_auth import policy

from cyborg.dashboard import api
from cyborg.dashboard.admin import common
from cyborg.dashboard.admin.accelerator_devices import tables

TEMPLATES = 'accelerators/admin/accelerator_devices/'


class DeviceTab(tabs.Tab):
    """A tab of the device the view read once (``tab_group.device``)."""

    @property
    def device(self) -> dict[str, Any]:
        return self.tab_group.kwargs['device']

    def get_context_data(self, request: Any, **kwargs: Any) -> dict[str, Any]:
        return {'device': self.device,
                'health': common.device_health(self.device)}


class OverviewTab(DeviceTab):
    name = _('Overview')
    slug = 'overview'
    template_name = TEMPLATES + '_tab_overview.html'

    def get_context_data(self, request: Any, **kwargs: Any) -> dict[str, Any]:
        return dict(super().get_context_data(request),
                    impact=self.tab_group.impact())


class DeployablesTab(tabs.TableTab):
    """The deployables of the device: ``GET /deployables`` filters by the
    device's integer id, which the API does not show, so they are the
    deployables its attach handles name (one GET each; a device has one
    deployable per physical function, so one or two)."""
    name = _('Deployables')
    slug = 'deployables'
    table_classes = (tables.DeployablesTable,)
    template_name = 'horizon/common/_detail_table.html'

    def get_deployables_data(self) -> list[dict[str, Any]]:
        handles = self.tab_group.handles()
        found = []
        for uuid in dict.fromkeys(h['deployable_uuid'] for h in handles.items
                                  if h.get('deployable_uuid')):
            deployable = common.loaded(
                self.request,
                functools.partial(api.deployable, self.request, uuid), None)
            if deployable is not None:
                found.append(deployable)
        return found


class AttachHandlesTab(tabs.TableTab):
    name = _('Attach handles')
    slug = 'attach_handles'
    table_classes = (tables.AttachHandlesTable,)
    template_name = 'horizon/common/_detail_table.html'

    def allowed(self, request: Any) -> bool:
        return policy.check(common.rule('attach_handle:get_all'), request)

    def get_attach_handles_data(self) -> list[dict[str, Any]]:
        marker = self.request.GET.get(
            tables.AttachHandlesTable._meta.pagination_param)
        page = self.tab_group.handles(marker)
        self._more = page.next_marker is not None
        return page.items

    def has_more_data(self, table: Any) -> bool:
        return getattr(self, '_more', False)


class LayoutTab(DeviceTab):
    name = _('Layout')
    slug = 'layout'
    template_name = TEMPLATES + '_tab_layout.html'
    # Reading the options asks the device's agent: only when opened.
    preload = False

    def allowed(self, request: Any) -> bool:
        return policy.check(common.rule('device:get_layout'), request)

    def get_context_data(self, request: Any, **kwargs: Any) -> dict[str, Any]:
        layout = common.loaded(request, functools.partial(
            api.device_layout, request, self.device['uuid']), None)
        return dict(super().get_context_data(request), layout=layout,
                    can_set=policy.check(common.rule('device:set_layout'),
                                         request))


class HealthTab(DeviceTab):
    name = _('Health')
    slug = 'health'
    template_name = TEMPLATES + '_tab_health.html'

    def get_context_data(self, request: Any, **kwargs: Any) -> dict[str, Any]:
        return dict(super().get_context_data(request),
                    impact=self.tab_group.impact(),
                    can_set=policy.check(common.rule('device:set_health'),
                                         request),
                    # Horizon renders a tab without its request, so the
                    # Clear form's {% csrf_token %} has no token unless
                    # given one: Django refuses the POST (403).
                    csrf_token=csrf.get_token(request))


class DeviceTabs(tabs.DetailTabsGroup):
    slug = 'device_details'
    tabs = (OverviewTab, DeployablesTab, AttachHandlesTab, LayoutTab,
            HealthTab)
    sticky = True

    def impact(self) -> dict[str, Any] | None:
        """What taking the device out would touch; read once a page."""
        if not hasattr(self, '_impact'):
            self._impact = None
            if policy.check(common.rule('device:impact'), self.request):
                self._impact = common.loaded(self.request, functools.partial(
                    api.device_impact, self.request,
                    self.kwargs['device']['uuid']), None)
        return self._impact

    def handles(self, marker: str | None = None) -> api.Page:
        """A page of the device's attach handles; read once a page."""
        cache = self.__dict__.setdefault('_handles', {})
        if marker not in cache:
            cache[marker] = common.loaded(self.request, functools.partial(
                api.attach_handles, self.request,
                device_uuid=self.kwargs['device']['uuid'], marker=marker),
                api.Page([], None))
        return cache[marker]
