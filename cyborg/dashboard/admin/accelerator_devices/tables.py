"""The tables of the Accelerator Devices panel: devices, deployables and
attach handles."""
from typing import Any

from django import urls
from django.utils.translation import gettext_lazy as _
from horizon import tables

from cyborg.dashboard import api
from cyborg.dashboard.admin import common

DETAIL_URL = 'horizon:admin:accelerator_devices:detail'


def _detail_link(device: dict[str, Any]) -> str:
    return urls.reverse(DETAIL_URL, args=[device['uuid']])


class DeviceFilter(tables.FilterAction):
    """Filters the API applies (``GET /devices?hostname=&type=&health=``),
    so a page is a page of matching devices."""
    filter_type = 'server'
    filter_choices = (('hostname', _('Host ='), True),
                      ('type', _('Type ='), True),
                      ('health', _('Health ='), True))


class EnableDevice(common.ApiAction):
    name = 'enable'
    verbose_name = _('Enable')
    policy_rules = common.rule('device:enable')
    success = _('Enabled device %s.')

    def allowed(self, request: Any, datum: Any) -> bool:
        return datum is not None and datum.get('status') != 'enabled'

    def call(self, table: Any, request: Any, obj_id: Any) -> None:
        api.device_enable(request, obj_id)


class DisableDevice(common.ApiAction):
    name = 'disable'
    verbose_name = _('Disable')
    classes = ('btn-danger',)
    policy_rules = common.rule('device:disable')
    success = _('Disabled device %s: its accelerators are not scheduled.')

    def allowed(self, request: Any, datum: Any) -> bool:
        return datum is not None and datum.get('status') == 'enabled'

    def call(self, table: Any, request: Any, obj_id: Any) -> None:
        api.device_disable(request, obj_id)


class DevicesTable(tables.DataTable):
    uuid = tables.Column('uuid', verbose_name=_('UUID'), link=_detail_link)
    hostname = tables.Column('hostname', verbose_name=_('Host'))
    type = tables.Column('type', verbose_name=_('Type'))
    vendor = tables.Column('vendor', verbose_name=_('Vendor'))
    model = tables.Column('model', verbose_name=_('Model'))
    status = tables.Column('status', verbose_name=_('Status'))
    health = tables.Column(common.device_health, verbose_name=_('Health'))
    health_reason = tables.Column('health_reason',
                                  verbose_name=_('Health reason'))

    def get_object_id(self, datum: dict[str, Any]) -> str:
        return datum['uuid']

    def get_object_display(self, datum: dict[str, Any]) -> str:
        return f"{datum.get('model') or datum['type']} on {datum['hostname']}"

    class Meta:
        name = 'devices'
        verbose_name = _('Accelerator Devices')
        table_actions = (DeviceFilter,)
        row_actions = (EnableDevice, DisableDevice)


class DeployablesTable(tables.DataTable):
    name = tables.Column('name', verbose_name=_('Name'))
    uuid = tables.Column('uuid', verbose_name=_('UUID'))
    num_accelerators = tables.Column('num_accelerators',
                                     verbose_name=_('Accelerators'))
    driver_name = tables.Column('driver_name', verbose_name=_('Driver'))
    rp_uuid = tables.Column('rp_uuid', verbose_name=_('Resource provider'))
    bitstream_id = tables.Column('bitstream_id', verbose_name=_('Bitstream'))

    def get_object_id(self, datum: dict[str, Any]) -> str:
        return datum['uuid']

    class Meta:
        name = 'deployables'
        verbose_name = _('Deployables')


def _attach_info(handle: dict[str, Any]) -> str:
    info = handle.get('attach_info') or {}
    return ', '.join(f'{k}={v}' for k, v in sorted(info.items()))


def _in_maintenance(datum: Any) -> bool:
    # The API serves clean and release only for a handle whose clean
    # failed (409 otherwise): offering them elsewhere only earns a refusal.
    return datum is not None and datum.get('clean_state') == 'maintenance'


class CleanHandle(common.ApiAction):
    name = 'clean'
    verbose_name = _('Clean')
    policy_rules = common.rule('attach_handle:clean')
    success = _('Cleaning attach handle %s again.')

    def allowed(self, request: Any, datum: Any) -> bool:
        return _in_maintenance(datum)

    def call(self, table: Any, request: Any, obj_id: Any) -> None:
        api.attach_handle_clean(request, obj_id)


class ReleaseHandle(common.ApiAction):
    name = 'release'
    verbose_name = _('Release')
    classes = ('btn-danger',)
    policy_rules = common.rule('attach_handle:release')
    success = _('Released attach handle %s uncleaned.')

    def allowed(self, request: Any, datum: Any) -> bool:
        return _in_maintenance(datum)

    def call(self, table: Any, request: Any, obj_id: Any) -> None:
        api.attach_handle_release(request, obj_id)


class AttachHandlesTable(tables.DataTable):
    uuid = tables.Column('uuid', verbose_name=_('UUID'))
    attach_type = tables.Column('attach_type', verbose_name=_('Type'))
    attach_info = tables.Column(_attach_info, verbose_name=_('Address'))
    in_use = tables.Column('in_use', verbose_name=_('In use'))
    clean_state = tables.Column('clean_state', verbose_name=_('Cleaning'))
    clean_reason = tables.Column('clean_reason',
                                 verbose_name=_('Cleaning reason'))
    clean_since = tables.Column('clean_since', verbose_name=_('Since'))
    deployable_uuid = tables.Column('deployable_uuid',
                                    verbose_name=_('Deployable'))

    def get_object_id(self, datum: dict[str, Any]) -> str:
        return datum['uuid']

    class Meta:
        name = 'attach_handles'
        verbose_name = _('Attach handles')
        # Its own marker: the detail page's tables page independently.
        pagination_param = 'handle_marker'
        prev_pagination_param = 'handle_prev_marker'
        row_actions = (CleanHandle, ReleaseHandle)
