"""The Device Profiles panel: the profiles a project may ask for."""
import horizon
from django.utils.translation import gettext_lazy as _

from cyborg.dashboard import conf


class DeviceProfiles(horizon.Panel):
    name = _('Device Profiles')
    slug = 'device_profiles'
    # Shown only where the catalog has cyborg and the API would list.
    permissions = (f'openstack.services.{conf.SERVICE}',)
    policy_rules = ((conf.SERVICE, 'cyborg:device_profile:get_all'),)
