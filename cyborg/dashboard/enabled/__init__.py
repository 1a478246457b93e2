"""Horizon's "enabled" files of the plugin: copy ``_*.py`` into
``openstack_dashboard/local/enabled/``. Each names a panel group or a
panel; Horizon loads them in the order of their names (6000s: after its
own panels)."""
