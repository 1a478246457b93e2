"""Every policy rule cyborg defines, for oslo.policy and its generators."""
from collections.abc import Iterator

from oslo_policy import policy

from cyborg.policies import arq
from cyborg.policies import attribute
from cyborg.policies import base
from cyborg.policies import deployable
from cyborg.policies import device
from cyborg.policies import device_profile
from cyborg.policies import driver
from cyborg.policies import host
from cyborg.policies import service


def list_policies() -> Iterator[policy.RuleDefault]:
    for module in (base, device_profile, arq, device, deployable, attribute,
                   service, driver, host):
        yield from module.list_rules()
