"""The mediated-device option every mdev-capable driver group has.

Not a group of its own: ``[gpu_devices]`` and ``[generic_pci]`` have it
(``groups.driver_group``), so that an operator sets it where the family's
other options are.
"""
from oslo_config import cfg

#: Cyborg's agent creates an mdev when a request is bound to its handle.
CYBORG = 'cyborg'
#: nova-compute creates the mdev from the bound request (Nova 2026.2).
NOVA = 'nova'


def mdev_opts(family: str) -> list[cfg.Opt]:
    """``mdev_creator`` for the mdevs of ``family`` (a plural noun)."""
    return [
        cfg.StrOpt(
            'mdev_creator',
            default=CYBORG,
            choices=[
                (CYBORG, "Cyborg's agent creates an mdev when an "
                         'accelerator request is bound to its handle '
                         '(the bind is BindStarted until it has) and '
                         'removes it when the request is unbound or '
                         'deleted.'),
                (NOVA, 'nova-compute creates a persistent mdev from the '
                       'bound request (attach_handle_uuid, and the parent '
                       'function and asked_type in attach_handle_info) '
                       'when it first starts a guest with the handle, and '
                       'uses it again for the handle\'s next instance; '
                       'nothing removes it (Nova deletes no mdev); needs '
                       'Nova 2026.2 or later. Binds are Bound at once and '
                       'unbinds free the handle at once; the agent never '
                       'creates or removes these mdevs.')],
            help=f'Who creates the mediated devices of the '
                 f'{family}. The attach handles of "nova" carry '
                 '"mdev_creator": "nova" in their attach info. Changing '
                 'it reports new attach handles: the ones in use stay '
                 'with the old owner until released, and are never handed '
                 'out again.'),
    ]
