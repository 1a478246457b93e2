"""The device-lifecycle options every driver group has.

Not a group of its own: each driver's group (``[nic_devices]``,
``[gpu_devices]``, ``[fpga]``, ...) has these (``groups.driver_group``), so
that an operator sets them per driver family where the family's other
options are.
"""
from oslo_config import cfg

#: The clean of a family whose functions each have a sysfs reset file.
FUNCTION_RESET = ("a function-level reset through the function's sysfs "
                  'reset file')


def lifecycle_opts(family: str, clean_how: str) -> list[cfg.Opt]:
    """``clean_after_use`` and ``vfio_bind`` for the drivers of
    ``family`` (a plural noun), whose clean does ``clean_how``."""
    return [
        cfg.BoolOpt(
            'clean_after_use',
            default=False,
            mutable=True,
            help=f'Clean every attach handle of the {family} after an '
                 f'instance releases it ({clean_how}) before it is offered '
                 'again: until the clean succeeds the handle is "cleaning" '
                 'and reserved in placement; a failed clean holds it in '
                 '"maintenance" until an operator retries or releases it. '
                 'A device profile may ask for a clean on its own.'),
        cfg.BoolOpt(
            'vfio_bind',
            default=False,
            help=f'Bind the functions the {family} lend (the device, or '
                 'its virtual functions) to vfio-pci when the device '
                 'becomes enabled, through driver_override, unbind and '
                 'drivers_probe, so that they can be passed to instances '
                 'without a host driver holding them.'),
    ]
