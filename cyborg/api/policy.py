"""Policy enforcement: one oslo.policy enforcer per application."""
import time
from collections.abc import Hashable
from typing import Any

from oslo_config import cfg
from oslo_policy import opts as policy_opts
from oslo_policy import policy

from cyborg import context as cyborg_context
from cyborg import policies
from cyborg.common import exception

# How often the policy files are looked at again for changes, in seconds.
RECHECK_SECONDS = 1.0
# Decisions remembered at most; the cache starts over beyond that.
MAX_DECISIONS = 4096


class Enforcer(policy.Enforcer):
    """oslo.policy's enforcer, cheaper on the API's every request.

    oslo.policy looks for the policy file and its directories on each
    check (a search of every configuration directory when there is no
    file) and evaluates the rule tree anew; that was about a tenth of the
    API's CPU time for a create and a quarter for a list. Here the files
    are looked at again at most every ``recheck`` seconds, and a decision
    is kept for the same rule, target and credentials until the rules
    change. Rules that call out (``http:`` checks) are never cached: the
    remote service may answer differently each time.
    """

    def __init__(self, conf: cfg.ConfigOpts,
                 recheck: float = RECHECK_SECONDS) -> None:
        super().__init__(conf)
        self._recheck = recheck
        self._next_load = 0.0
        self._rules_seen: dict[str, str] | None = None
        self._cacheable = False
        self._decisions: dict[Hashable, bool] = {}

    def load_rules(self, force_reload: bool = False) -> None:
        now = time.monotonic()
        if not force_reload and now < self._next_load:
            return
        super().load_rules(force_reload)
        self._next_load = now + self._recheck
        seen = {name: str(check) for name, check in self.rules.items()}
        if seen != self._rules_seen:
            self._decisions = {}
            self._rules_seen = seen
            self._cacheable = not any('http:' in text or 'https:' in text
                                      for text in seen.values())

    def clear(self) -> None:
        super().clear()
        self._next_load = 0.0
        self._rules_seen = None
        self._decisions = {}

    def allowed(self, action: str, target: dict[str, Any],
                context: cyborg_context.RequestContext) -> bool:
        """Whether ``context`` may do ``action`` on ``target``; an
        unregistered action raises PolicyNotRegistered."""
        self.load_rules()
        # The cache of these rules: a reload replaces it, so a decision
        # taken while the rules change is never kept for the new rules.
        decisions = self._decisions if self._cacheable else None
        key = _frozen(action, target, context.to_policy_values())
        if key is not None and decisions is not None:
            known = decisions.get(key)
            if known is not None:
                return known
        try:
            result = bool(self.authorize(action, target, context))
        except policy.InvalidScope:
            result = False
        if key is not None and decisions is not None:
            if len(decisions) >= MAX_DECISIONS:
                decisions.clear()
            decisions[key] = result
        return result


def _frozen(action: str, target: dict[str, Any],
            creds: Any) -> Hashable | None:
    """A key of everything a decision depends on; None if a value cannot
    be part of one."""
    def freeze(values: Any) -> tuple:
        return tuple(sorted(
            (k, tuple(v) if isinstance(v, list) else v)
            for k, v in values.items()))
    try:
        key = (action, freeze(target), freeze(creds))
        hash(key)
    except TypeError:
        return None
    return key


def set_defaults(conf: cfg.ConfigOpts) -> None:
    """Secure defaults: new rules only, and tokens must be project-scoped."""
    policy_opts.set_defaults(conf, policy_file='policy.yaml',
                             enforce_scope=True, enforce_new_defaults=True)


def make_enforcer(conf: cfg.ConfigOpts) -> Enforcer:
    """The enforcer of cyborg's rules, with the policy files ``conf``
    names."""
    set_defaults(conf)
    enforcer = Enforcer(conf)
    enforcer.register_defaults(list(policies.list_policies()))
    return enforcer


def authorize(enforcer: Enforcer, context: cyborg_context.RequestContext,
              action: str, target: dict[str, Any] | None = None) -> None:
    """Raise PolicyNotAuthorized unless ``context`` may do ``action``.

    The default target is the caller's own project, which is what rules
    on project-owned resources compare with; the caller checks ownership
    of the resource itself (in SQL).
    """
    target = target or {'project_id': context.project_id,
                        'user_id': context.user_id}
    if not enforcer.allowed(action, target, context):
        raise exception.PolicyNotAuthorized(action=action)


def check(enforcer: Enforcer, context: cyborg_context.RequestContext,
          action: str) -> bool:
    """Whether ``context`` may do ``action``, without raising."""
    try:
        authorize(enforcer, context, action)
    except exception.PolicyNotAuthorized:
        return False
    return True
