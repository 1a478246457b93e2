"""The plugin as a Django application: its templates and static files.

Labelled ``cyborg_dashboard``: Django labels an application by the last
part of its name by default, and ``dashboard`` is too common a name to
be unique among a Horizon's plugins.
"""
from django.apps import AppConfig


class CyborgDashboardConfig(AppConfig):
    name = 'cyborg.dashboard'
    label = 'cyborg_dashboard'
    verbose_name = 'Cyborg accelerators'
