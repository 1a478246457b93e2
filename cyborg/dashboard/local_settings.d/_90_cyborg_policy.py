# Cyborg's policy for Horizon: the API's defaults and the operator's
# overrides (see cyborg/dashboard/conf/__init__.py). Horizon executes this
# file in its settings' namespace, where POLICY_FILES and
# DEFAULT_POLICY_FILES are already defined.
from cyborg.dashboard import conf as _cyborg_conf

POLICY_FILES[_cyborg_conf.SERVICE] = _cyborg_conf.POLICY_FILE  # noqa: F821
DEFAULT_POLICY_FILES[_cyborg_conf.SERVICE] = (  # noqa: F821
    _cyborg_conf.DEFAULT_POLICY_FILE)
