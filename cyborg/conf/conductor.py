"""Options of the [conductor] group: binding accelerator requests."""
from oslo_config import cfg

conductor_group = cfg.OptGroup(
    'conductor',
    title='Conductor options',
    help='How cyborg-conductor binds accelerator requests.')

conductor_opts: list[cfg.Opt] = [
    cfg.IntOpt(
        'bind_timeout',
        default=300,
        min=1,
        help='Seconds a bind that needs the agent (programming an FPGA, '
             'creating a vGPU) may take. A bind not finished by then ends '
             'BindFailed. Keep it below Nova\'s [DEFAULT] '
             'arq_binding_timeout (300 by default), or Nova gives up '
             'first.'),
    cfg.IntOpt(
        'bind_workers',
        default=16,
        min=1,
        help='Threads of a conductor that run binds needing the agent, and '
             'send events to Nova.'),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_group(conductor_group)
    conf.register_opts(conductor_opts, group=conductor_group)


def list_opts() -> dict[cfg.OptGroup, list[cfg.Opt]]:
    return {conductor_group: conductor_opts}
