"""The Accelerator Hosts panel of the Admin dashboard."""
import horizon
from django.utils.translation import gettext_lazy as _

from cyborg.dashboard.admin import common


class AcceleratorHosts(horizon.Panel):
    name = _('Accelerator Hosts')
    slug = 'accelerator_hosts'
    permissions = ('openstack.services.accelerator',)
    policy_rules = common.rule('capacity:get')
