"""Cyborg's pages in Horizon: accelerators for administrators and projects.

A Horizon plugin, installed with ``pip install 'cyborg[dashboard]'`` on the
Horizon host and enabled by copying ``enabled/_*.py`` into
``openstack_dashboard/local/enabled/`` and ``local_settings.d/*.py`` into
``openstack_dashboard/local/local_settings.d/`` (see the admin guide's
"Dashboard" page). Every page calls cyborg's API with the logged-in user's
token (``api.py``); Horizon decides what to show from cyborg's policy
defaults (``conf/``), the same rules the API enforces.
"""
