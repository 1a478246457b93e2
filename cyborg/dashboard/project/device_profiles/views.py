"""The Device Profiles panel's pages: the list, one profile, create."""
from typing import Any

from django.urls import reverse
from django.urls import reverse_lazy
from django.utils.translation import gettext_lazy as _
from horizon import forms
from horizon import tables
from horizon import views
from horizon.utils import filters

from cyborg.dashboard import api
from cyborg.dashboard import errors
from cyborg.dashboard.project import common
from cyborg.dashboard.project.device_profiles import forms as profile_forms
from cyborg.dashboard.project.device_profiles import tables as profile_tables

TEMPLATES = 'accelerators/project/device_profiles'


class IndexView(common.MarkerPagedViewMixin, tables.DataTableView):
    table_class = profile_tables.DeviceProfilesTable
    template_name = f'{TEMPLATES}/index.html'
    page_title = _('Device Profiles')

    def get_data(self) -> list[dict[str, Any]]:
        try:
            return self.page_items(api.device_profiles(
                self.request, marker=self.marker(),
                name=self.server_filter()))
        except api.ApiError as exc:
            errors.show(self.request, exc)
            return []


class DetailView(views.HorizonTemplateView):
    template_name = f'{TEMPLATES}/detail.html'
    page_title = '{{ profile.name }}'

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        index = reverse('horizon:project:device_profiles:index')
        try:
            # GET /device_profiles/{uuid} wraps the profile.
            profile = api.device_profile(
                self.request, kwargs['uuid'])['device_profile']
        except api.ApiError as exc:
            errors.show(self.request, exc, redirect=index)
        context['profile'] = profile
        context['groups'] = [
            {'number': i + 1, 'summary': profile_tables.group_summary(g),
             'keys': sorted(g.items())}
            for i, g in enumerate(profile.get('groups') or [])]
        context['visibility'] = profile_tables.visibility(profile)
        context['created'] = filters.parse_isotime(profile['created_at'])
        context['updated'] = filters.parse_isotime(profile['updated_at'])
        context['url'] = index
        return context


class CreateView(forms.ModalFormView):
    form_class = profile_forms.CreateProfileForm
    form_id = 'create_device_profile_form'
    modal_id = 'create_device_profile_modal'
    template_name = f'{TEMPLATES}/create.html'
    page_title = _('Create Device Profile')
    submit_label = _('Create Device Profile')
    submit_url = reverse_lazy('horizon:project:device_profiles:create')
    success_url = reverse_lazy('horizon:project:device_profiles:index')
