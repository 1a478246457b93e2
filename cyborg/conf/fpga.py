"""Options of the [fpga] group: the tools the FPGA drivers program with."""
from oslo_config import cfg

from cyborg.conf import groups

fpga_opts = [
    cfg.IntOpt(
        'program_timeout',
        default=900,
        min=1,
        help='Seconds a programming tool may run before it is stopped and '
             'the programming request fails. Loading a partial bitstream '
             'takes seconds; flashing a whole shell can take many minutes.'),
    cfg.StrOpt(
        'fpgaconf_path',
        default='/usr/bin/fpgaconf',
        help='The OPAE fpgaconf tool that loads an accelerator function '
             '(a .gbs file) into the partial-reconfiguration region of an '
             'Intel FPGA card (PAC Arria 10, PAC N3000, PAC D5005, OFS '
             'cards). A bare name is looked up on PATH.'),
    cfg.ListOpt(
        'fpgaconf_args',
        default=['--bus', '0x{bus}', '--device', '0x{device}',
                 '--function', '0x{function}', '{image}'],
        help='Arguments given to fpgaconf_path to program the card\'s '
             'physical function. On hosts with several PCI segments add '
             '"--segment,0x{domain}" (OPAE 2.x).'),
    cfg.StrOpt(
        'xbmgmt_path',
        default='/opt/xilinx/xrt/bin/xbmgmt',
        help='The XRT xbmgmt tool that programs Xilinx Alveo cards through '
             'their management physical function.'),
    cfg.ListOpt(
        'xbmgmt_args',
        default=['program', '--device', '{address}', '--user', '{image}'],
        help='Arguments given to xbmgmt_path; {address} is the management '
             'function, e.g. 0000:3b:00.0. The default loads an .xclbin '
             'into the user partition; to program the shell partition of a '
             '2RP platform instead, write the shell option in place of the '
             'user option (xbmgmt asks for confirmation before flashing a '
             'shell or a base; its global force option gives it). Note that '
             '"--base --image" takes the name of a base partition package '
             'installed on the host, not a file, so it cannot load an '
             'image downloaded from Glance.'),
    cfg.DictOpt(
        'golden_images',
        default={},
        help='The image each FPGA driver loads to clean a card after use '
             '(clean_after_use), as <driver>:<path> entries, e.g. '
             '"intel_fpga:/var/lib/cyborg/golden/n3000.gbs,'
             'xilinx_fpga:/var/lib/cyborg/golden/u250.xclbin": a file on '
             'the agent\'s host, loaded with the same tool and arguments '
             'as a Glance image. Per driver, since the tools and formats '
             'differ; a driver without an entry cannot clean its cards, '
             'and a clean it is asked for fails with that reason.'),
]

GROUP = groups.driver_group(
    'fpga',
    title='FPGA driver options',
    help='How the intel_fpga and xilinx_fpga drivers load a bitstream onto '
         'an FPGA: which vendor tool they run, with which arguments, for '
         'how long. The tools run without a shell, behind [agent] '
         'root_helper when one is set. In the argument lists these '
         'placeholders are replaced for the device being programmed: '
         '{address} (its PCI address, 0000:5e:00.0), {domain} (0000), '
         '{bus} (5e), {device} (00), {function} (0), all lower-case hex '
         'without 0x, and {image} (the path of the downloaded bitstream, '
         'which every list must contain). The agent refuses to start when '
         'a list names another placeholder.',
    family='FPGA cards of the intel_fpga, xilinx_fpga and inspur_fpga '
           'drivers',
    clean_how="the card's golden image of golden_images is loaded again",
    opts=fpga_opts)

register_opts = GROUP.register_opts
list_opts = GROUP.list_opts
