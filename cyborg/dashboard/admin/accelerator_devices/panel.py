"""The Accelerator Devices panel of the Admin dashboard."""
import horizon
from django.utils.translation import gettext_lazy as _

from cyborg.dashboard.admin import common


class AcceleratorDevices(horizon.Panel):
    name = _('Accelerator Devices')
    slug = 'accelerator_devices'
    permissions = ('openstack.services.accelerator',)
    policy_rules = common.rule('device:get_all')
