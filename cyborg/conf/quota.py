"""Options of the [quota] group: project limits from Keystone.

Keystone's unified limits (registered limits for every project, project
limits for one) are read with oslo.limit, whose ``[oslo_limit]`` group
says how to reach Keystone and which endpoint's limits are cyborg's.
"""
from oslo_config import cfg
from oslo_config import types

from cyborg.conf import groups

#: The resources a project may be limited in: its accelerator requests,
#: and the devices its requests hold, per resource class (as Nova names
#: the classes of its own limits).
RESOURCE = r'^(accelerator_requests|class:[A-Z0-9_]+)$'

quota_opts = [
    cfg.StrOpt(
        'driver',
        default='none',
        choices=[('none', 'No limits: no project is limited, and nothing '
                          'is asked of Keystone.'),
                 ('unified_limits', "Keystone's unified limits, read "
                                    'with oslo.limit as [oslo_limit] '
                                    'says, enforced by the conductor.')],
        help='Whether the accelerator requests a project creates and the '
             'devices they bind are limited. With unified_limits the '
             'conductor reads the limits of the endpoint [oslo_limit] '
             'names (registered limits, and a project\'s own limits where '
             'it has them) and refuses, with a 403, a create or a bind '
             'that would take a project over one; Keystone unreachable, it '
             'answers 503. The conductor\'s user needs the reader role on '
             'the system scope to read other projects\' limits.'),
    cfg.IntOpt(
        'cache_seconds',
        default=30,
        min=0,
        help='Seconds the conductor keeps the limits it read from '
             'Keystone (and its oslo.limit enforcer, whose endpoint and '
             'enforcement model it looked up) before it reads them again: '
             'a changed limit is enforced at most this long after the '
             'change. Within it a write of a project seen before asks '
             'Keystone nothing; afterwards the first write asks it the '
             'enforcement model, the endpoint (one to three calls), the '
             'registered limits and the project\'s limits, and a later '
             'write of another project asks for that project\'s limits. '
             '0 reads everything again for every write, as Nova does.'),
    cfg.StrOpt(
        'unified_limits_resource_strategy',
        default='require',
        choices=[('require', 'The resources in '
                             'unified_limits_resource_list must have a '
                             'registered limit: without one their limit '
                             'is 0. Others without one are unlimited.'),
                 ('ignore', 'The resources in unified_limits_resource_list '
                            'without a registered limit are unlimited. '
                            'Others without one have a limit of 0.')],
        help='What the limit of a resource with no registered limit in '
             'Keystone is (a project limit needs a registered limit '
             'first), with unified_limits_resource_list; as Nova\'s '
             'option of the same name.'),
    cfg.ListOpt(
        'unified_limits_resource_list',
        item_type=types.String(regex=RESOURCE),
        default=['accelerator_requests'],
        help='The resources unified_limits_resource_strategy names: '
             'accelerator_requests (the requests a project holds, in any '
             'state) and class:<resource class> (the devices its requests '
             'hold, BindStarted or Bound, of the class their device '
             'profile group asks for, e.g. class:FPGA, class:VGPU, '
             'class:CUSTOM_...). By default accelerator_requests needs a '
             'registered limit, as Nova\'s servers does: limits switched '
             'on without it refuse every create, which says what is '
             'missing; device classes without one are unlimited.'),
]

GROUP = groups.Group(
    'quota', title='Project limits',
    help="How many accelerator requests a project may hold, and how many "
         "devices they may hold per resource class, as Keystone's unified "
         'limits say (oslo.limit, configured in [oslo_limit]).',
    opts=quota_opts)

register_opts = GROUP.register_opts
list_opts = GROUP.list_opts
