"""Options of the [glance] group: where agents fetch FPGA bitstreams."""
from oslo_config import cfg

from cyborg.conf import keystone

glance_opts = [
    cfg.IntOpt(
        'download_retries',
        default=3,
        min=0,
        help='How many times a failed bitstream download is tried again, '
             '2 seconds apart. keystoneauth tries again a request that '
             'could not connect or got a 5xx answer; the agent tries again '
             'a download whose data was cut short or does not verify '
             'against the image\'s hash (or size). Each kind of failure is '
             'tried again up to this many times.'),
]

GROUP = keystone.ServiceClientGroup(
    'glance',
    title='Glance (image service) options',
    help='The image service holding FPGA bitstreams. The agent downloads '
         'the bitstream an accelerator request asks for before it programs '
         'the device. The usual keystoneauth auth, session and adapter '
         'options.',
    opts=glance_opts,
    service_type='image')

register_opts = GROUP.register_opts
list_opts = GROUP.list_opts
