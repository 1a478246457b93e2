"""Policy enforcement: one oslo.policy enforcer per process."""
from typing import Any

from oslo_config import cfg
from oslo_policy import opts as policy_opts
from oslo_policy import policy

from cyborg import context as cyborg_context
from cyborg import policies
from cyborg.common import exception

_ENFORCER: policy.Enforcer | None = None


def set_defaults(conf: cfg.ConfigOpts) -> None:
    """Secure defaults: new rules only, and tokens must be project-scoped."""
    policy_opts.set_defaults(conf, policy_file='policy.yaml',
                             enforce_scope=True, enforce_new_defaults=True)


def get_enforcer(conf: cfg.ConfigOpts = cfg.CONF) -> policy.Enforcer:
    global _ENFORCER
    if _ENFORCER is None:
        set_defaults(conf)
        enforcer = policy.Enforcer(conf)
        enforcer.register_defaults(policies.list_policies())
        _ENFORCER = enforcer
    return _ENFORCER


def reset() -> None:
    global _ENFORCER
    _ENFORCER = None


def authorize(context: cyborg_context.RequestContext, action: str,
              target: dict[str, Any] | None = None) -> None:
    """Raise PolicyNotAuthorized unless ``context`` may do ``action``.

    The default target is the caller's own project, which is what rules
    on project-owned resources compare with; the caller checks ownership
    of the resource itself (in SQL).
    """
    target = target or {'project_id': context.project_id,
                        'user_id': context.user_id}
    try:
        get_enforcer().authorize(action, target, context,
                                 do_raise=True,
                                 exc=exception.PolicyNotAuthorized,
                                 action=action)
    except policy.InvalidScope:
        raise exception.PolicyNotAuthorized(action=action) from None


def check(context: cyborg_context.RequestContext, action: str) -> bool:
    """Whether ``context`` may do ``action``, without raising."""
    try:
        authorize(context, action)
    except exception.PolicyNotAuthorized:
        return False
    return True
