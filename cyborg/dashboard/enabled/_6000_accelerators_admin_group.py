# The "Accelerators" group of Horizon's Admin dashboard.
from django.utils.translation import gettext_lazy as _

PANEL_GROUP = 'accelerators'
PANEL_GROUP_NAME = _('Accelerators')
PANEL_GROUP_DASHBOARD = 'admin'
# The plugin's Django application (templates, static files), named once:
# Horizon adds each enabled file's list to INSTALLED_APPS as it is, and
# Django refuses to start on an application listed twice.
ADD_INSTALLED_APPS = ['cyborg.dashboard']
