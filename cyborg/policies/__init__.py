"""Every policy rule cyborg defines, for oslo.policy and its generators."""
from collections.abc import Iterator

from oslo_policy import policy

from cyborg.policies import base


def list_policies() -> Iterator[policy.RuleDefault]:
    yield from base.list_rules()
