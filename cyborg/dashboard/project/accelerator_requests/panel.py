"""The Accelerator Requests panel: the project's requests and where they
are bound."""
import horizon
from django.utils.translation import gettext_lazy as _

from cyborg.dashboard import conf


class AcceleratorRequests(horizon.Panel):
    name = _('Accelerator Requests')
    slug = 'accelerator_requests'
    permissions = (f'openstack.services.{conf.SERVICE}',)
    policy_rules = ((conf.SERVICE, 'cyborg:arq:get_all'),)
