"""The Accelerator Capacity panel of the Admin dashboard."""
import horizon
from django.utils.translation import gettext_lazy as _

from cyborg.dashboard.admin import common


class AcceleratorCapacity(horizon.Panel):
    name = _('Accelerator Capacity')
    slug = 'accelerator_capacity'
    permissions = ('openstack.services.accelerator',)
    policy_rules = common.rule('capacity:get')
