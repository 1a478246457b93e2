"""Every policy rule cyborg defines, for oslo.policy and its generators."""
from collections.abc import Iterator

from oslo_policy import policy

from cyborg.policies import arqs
from cyborg.policies import attach_handles
from cyborg.policies import attributes
from cyborg.policies import base
from cyborg.policies import capacity
from cyborg.policies import deployables
from cyborg.policies import device_profiles
from cyborg.policies import devices
from cyborg.policies import drivers
from cyborg.policies import hosts
from cyborg.policies import services


def list_policies() -> Iterator[policy.RuleDefault]:
    for module in (base, device_profiles, arqs, devices, deployables,
                   attributes, services, drivers, hosts, capacity,
                   attach_handles):
        yield from module.list_rules()
