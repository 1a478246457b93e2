"""Options of the [placement] group: how the conductor reaches placement."""
from oslo_config import cfg

from cyborg.conf import keystone

sync_opts = [
    cfg.IntOpt(
        'sync_interval',
        default=60,
        min=1,
        help='Seconds a host whose placement work failed waits, at most, '
             'for its next try; the wait doubles from a few seconds up to '
             'this. The conductor\'s placement task retries such hosts '
             '(the compute node did not exist yet, placement refused a '
             'write) and removes the providers of devices that are gone '
             'once nothing is allocated from them. An outage of placement '
             'does not count against hosts: while placement cannot be '
             'reached it is probed every 0.5 to 2 seconds, and the hosts '
             'that waited for it are published as soon as it answers.'),
    cfg.IntOpt(
        'reconcile_interval',
        default=600,
        min=0,
        help='Seconds between two full comparisons of every host\'s '
             'providers in placement with the database, which repairs '
             'providers deleted or changed by hand or restored from a '
             'backup. 0 disables it.'),
    cfg.IntOpt(
        'conflict_retries',
        default=5,
        min=0,
        help='How many times a placement write that failed because another '
             'writer changed the provider first (a generation conflict) is '
             're-read and tried again before the pass gives up on it; the '
             'same for the instance\'s allocation a live attach or detach '
             '(microversion 2.9) writes, whose PATCH then answers 409.'),
]

GROUP = keystone.ServiceClientGroup(
    'placement',
    title='Placement service options',
    help='The placement service the conductor publishes accelerators to, '
         'as nested resource providers under each compute node. The usual '
         'keystoneauth options: an auth plugin with a service user, '
         'session options (TLS, timeout) and adapter options (interface, '
         'region, endpoint_override).',
    opts=sync_opts,
    service_type='placement')

register_opts = GROUP.register_opts
list_opts = GROUP.list_opts
