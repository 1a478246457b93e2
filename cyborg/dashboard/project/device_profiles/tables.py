"""The table of device profiles, its filter and its actions."""
from typing import Any

from django.utils import html
from django.utils.translation import gettext_lazy as _
from django.utils.translation import ngettext_lazy
from horizon import messages
from horizon import tables
from horizon.utils import filters

from cyborg.dashboard import api
from cyborg.dashboard import conf
from cyborg.dashboard.project import common


def group_summary(group: dict[str, Any]) -> str:
    """One request group in a line, in placement's words: the resources
    with their amounts, then the traits required and forbidden, e.g.
    ``FPGA: 1; requires CUSTOM_FAKE_DEVICE``. ``accel:`` settings are on
    the detail page."""
    resources, required, forbidden = [], [], []
    for key, value in group.items():
        prefix, _sep, name = key.partition(':')
        if prefix == 'resources':
            resources.append(f'{name}: {value}')
        elif prefix == 'trait' and value == 'forbidden':
            forbidden.append(name)
        elif prefix == 'trait':
            required.append(name)
    parts = [', '.join(resources)] if resources else []
    if required:
        parts.append('requires ' + ', '.join(required))
    if forbidden:
        parts.append('forbids ' + ', '.join(forbidden))
    return '; '.join(parts)


def groups_summary(profile: dict[str, Any]) -> str:
    """Each group on a line of its own (escaped: the keys are the
    creator's text)."""
    return html.format_html_join(
        html.mark_safe('<br>'), '{}',
        ((group_summary(g),) for g in profile.get('groups') or []))


def visibility(profile: dict[str, Any]) -> str:
    # Before microversion 2.10 every profile was public and the field was
    # absent; the pages ask for 2.11, where it is always there.
    return _('Public') if profile.get('is_public', True) else _('Private')


class ProfileFilterAction(tables.FilterAction):
    # The API filters (GET /device_profiles?name=): a page holds only
    # API_RESULT_PAGE_SIZE rows, filtering them here would miss the rest.
    filter_type = 'server'
    filter_choices = (('name', _('Name ='), True),)


class CreateProfile(tables.LinkAction):
    name = 'create'
    verbose_name = _('Create Device Profile')
    url = 'horizon:project:device_profiles:create'
    classes = ('ajax-modal',)
    icon = 'plus'
    policy_rules = ((conf.SERVICE, 'cyborg:device_profile:create'),)


class DeleteProfile(tables.DeleteAction):
    policy_rules = ((conf.SERVICE, 'cyborg:device_profile:delete'),)

    @staticmethod
    def action_present(count: int) -> str:
        return ngettext_lazy('Delete Device Profile',
                             'Delete Device Profiles', count)

    @staticmethod
    def action_past(count: int) -> str:
        return ngettext_lazy('Deleted Device Profile',
                             'Deleted Device Profiles', count)

    def delete(self, request: Any, obj_id: str) -> None:
        try:
            api.device_profile_delete(request, obj_id)
        except api.ApiError as exc:
            # The batch reports "Unable to delete: <names>"; the API's
            # reason (e.g. requests still use the profile) goes beside it.
            messages.error(request, exc.message)
            raise


class DeviceProfilesTable(common.ApiRowsMixin, tables.DataTable):
    name = tables.WrappingColumn(
        'name', verbose_name=_('Name'),
        link='horizon:project:device_profiles:detail')
    description = tables.Column('description',
                                verbose_name=_('Description'))
    groups = tables.Column(groups_summary, verbose_name=_('Groups'))
    is_public = tables.Column(visibility, verbose_name=_('Visibility'))
    created = tables.Column('created_at', verbose_name=_('Created'),
                            filters=(filters.parse_isotime,))

    def get_object_display(self, datum: dict[str, Any]) -> str:
        return datum['name']

    class Meta:
        name = 'device_profiles'
        verbose_name = _('Device Profiles')
        table_actions = (ProfileFilterAction, CreateProfile, DeleteProfile)
        row_actions = (DeleteProfile,)
