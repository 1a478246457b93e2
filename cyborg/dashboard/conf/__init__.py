"""Cyborg's policy, as Horizon reads a service's policy.

``DEFAULT_POLICY_FILE`` is the API's policy in code, dumped in the format
of Horizon's ``manage.py dump_default_policies --namespace cyborg``
(``tools/dashboard_policies.py`` writes it; a test checks it is current).
``POLICY_FILE`` is where an operator's overrides go: empty as shipped, it
should hold what ``/etc/cyborg/policy.yaml`` holds on the API's hosts, so
that Horizon hides what the API would refuse.
"""
import pathlib

HERE = pathlib.Path(__file__).resolve().parent
DEFAULT_POLICY_FILE = str(HERE / 'default_policies' / 'cyborg.yaml')
POLICY_FILE = str(HERE / 'cyborg_policy.yaml')
# Horizon's name for cyborg's policy: the service type in the catalog.
SERVICE = 'accelerator'
