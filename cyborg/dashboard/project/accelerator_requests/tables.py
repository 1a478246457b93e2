"""The table of accelerator requests and its instance filter."""
from typing import Any

from django.urls import reverse
from django.utils.translation import gettext_lazy as _
from horizon import tables
from horizon.utils import filters

from cyborg.dashboard.project import common


def profile_group(arq: dict[str, Any]) -> str:
    """``<device profile> / group <n>``: the group of the profile the
    request stands for."""
    return (f'{arq["device_profile_name"]} / '
            f'{_("group")} {arq["device_profile_group_id"]}')


def attach_handle(arq: dict[str, Any]) -> str:
    """The attach handle as the API gives it, e.g. ``TEST_PCI: bus=0c,
    device=00, domain=0000, function=1``; empty until the request is
    bound."""
    kind = arq.get('attach_handle_type') or ''
    info = ', '.join(f'{k}={v}' for k, v in
                     sorted((arq.get('attach_handle_info') or {}).items()))
    return ': '.join(p for p in (kind, info) if p)


def device(arq: dict[str, Any]) -> str:
    """The resource provider of the device, then its attach handle."""
    return ' '.join(p for p in (arq.get('device_rp_uuid') or '',
                                attach_handle(arq)) if p)


def instance_url(arq: dict[str, Any]) -> str | None:
    if not arq.get('instance_uuid'):
        return None
    return reverse('horizon:project:instances:detail',
                   args=[arq['instance_uuid']])


class ArqFilterAction(tables.FilterAction):
    # The API filters (GET /accelerator_requests?instance=<uuid>): paging
    # is the API's, so filtering one page here would miss the others.
    filter_type = 'server'
    filter_choices = (('instance', _('Instance ID ='), True),)


class AcceleratorRequestsTable(common.ApiRowsMixin, tables.DataTable):
    uuid = tables.Column(
        'uuid', verbose_name=_('ID'),
        link='horizon:project:accelerator_requests:detail')
    state = tables.Column('state', verbose_name=_('State'))
    profile = tables.Column(profile_group,
                            verbose_name=_('Device Profile / Group'))
    hostname = tables.Column('hostname', verbose_name=_('Host'))
    instance = tables.Column('instance_uuid', verbose_name=_('Instance'),
                             link=instance_url)
    device = tables.WrappingColumn(device, verbose_name=_('Device'))
    created = tables.Column('created_at', verbose_name=_('Created'),
                            filters=(filters.parse_isotime,))

    def get_object_display(self, datum: dict[str, Any]) -> str:
        return datum['uuid']

    class Meta:
        name = 'accelerator_requests'
        verbose_name = _('Accelerator Requests')
        table_actions = (ArqFilterAction,)
