"""Options of the [nova] group: how the conductor tells Nova a bind ended."""
from oslo_config import cfg

from cyborg.conf import keystone

nova_opts = [
    cfg.BoolOpt(
        'send_events',
        default=True,
        help='Send an "accelerator-request-bound" event to Nova when a bind '
             'ends. Turn it off only where no Nova waits for binds (a '
             'stand-alone first run); Nova reads bind results when they '
             'arrive before it waits, but otherwise waits for the event '
             'until its [DEFAULT] arq_binding_timeout.'),
    cfg.FloatOpt(
        'event_resend_interval',
        default=0.5,
        min=0.05,
        help='Seconds between two looks of each conductor for events owed '
             'to Nova that are due again: events a conductor could not '
             'deliver (Nova unreachable, or a failure Nova dropped because '
             'the instance was on no host yet), and those of a conductor '
             'that stopped before it sent them. Each look is one indexed '
             'query. An event is sent again 0.5 s after its first try, then '
             '1, 2, 4 and every 8 s, at the first look after that.'),
    cfg.FloatOpt(
        'event_claim_timeout',
        default=30.0,
        min=0.1,
        help='Seconds a conductor holds the events it is sending to Nova; '
             'if it has not recorded Nova\'s answer by then (it stopped), '
             'another conductor sends them. Keep it above the time one '
             'POST to Nova may take with its retries ([nova] timeout and '
             'the retry options), or an event may reach Nova twice.'),
]

GROUP = keystone.ServiceClientGroup(
    'nova',
    title='Nova (compute API) options',
    help='The compute API the conductor sends "accelerator-request-bound" '
         'events to. The user must have the "service" role, which Nova\'s '
         'default policy requires for external events. The usual '
         'keystoneauth auth, session and adapter options. An events post '
         'that cannot connect or gets a 5xx answer is tried twice more, '
         '1.25 seconds apart, and one that gets a 4xx is not tried again; '
         'connect_retries, connect_retry_delay, status_code_retries, '
         'status_code_retry_delay and retriable_status_codes, when set, '
         'change that.',
    opts=nova_opts,
    service_type='compute')

register_opts = GROUP.register_opts
list_opts = GROUP.list_opts
