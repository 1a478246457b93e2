# The "Accelerators" group of Horizon's Project dashboard.
from django.utils.translation import gettext_lazy as _

PANEL_GROUP = 'accelerators'
PANEL_GROUP_NAME = _('Accelerators')
PANEL_GROUP_DASHBOARD = 'project'
