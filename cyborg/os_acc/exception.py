"""os-acc's exceptions: one base, each naming what failed and why.

Every error of :func:`cyborg.os_acc.plug` names the accelerator request it
is about, so that nova-compute can report it on the instance.
"""
from cyborg.common import exception


class OsAccException(exception.CyborgException):
    """Base class of everything os-acc raises."""

    msg_fmt = 'An unknown os-acc error occurred.'


class NotInitialized(OsAccException):
    msg_fmt = 'os-acc is not initialized; call cyborg.os_acc.initialize().'


class LoadFailed(OsAccException):
    msg_fmt = 'Cannot load os-acc %(kind)s %(name)s: %(reason)s'


class NoSuchPlugin(OsAccException):
    msg_fmt = ('No os-acc instance plugin is called %(name)s; loaded: '
               '%(loaded)s.')


class InvalidARQ(OsAccException):
    """An accelerator request cannot be plugged as it is; raised before
    anything is prepared."""

    msg_fmt = ('Accelerator request %(arq)s cannot be plugged: %(reason)s. '
               'Nothing was prepared.')

    @property
    def arq(self) -> str:
        return str(self.kwargs.get('arq', ''))


class PlugFailed(OsAccException):
    """A step of a plug failed; what it had prepared was undone."""

    msg_fmt = ('Plugging accelerator request %(arq)s into instance '
               '%(instance)s failed at %(step)s: %(reason)s. Everything '
               'prepared for the instance was undone%(leftovers)s.')

    @property
    def arq(self) -> str:
        return str(self.kwargs.get('arq', ''))


class AttachFailed(PlugFailed):
    """A step of a live attach failed; what that call had done was
    undone."""

    msg_fmt = ('Attaching accelerator request %(arq)s to running instance '
               '%(instance)s failed at %(step)s: %(reason)s. Everything this '
               'attach had done was undone%(leftovers)s.')


class NotLive(OsAccException):
    msg_fmt = ('os-acc instance plugin %(plugin)s cannot attach devices to, '
               'or detach them from, a running instance.')


class InvalidVAN(OsAccException):
    msg_fmt = 'Cannot use VAN %(van)s: %(reason)s'


class UnplugFailed(OsAccException):
    """Some VANs could not be released; the others were."""

    msg_fmt = ('Releasing accelerator request(s) %(arqs)s of instance '
               '%(instance)s failed: %(reason)s')


class DetachFailed(OsAccException):
    """Some devices could not be taken from the running instance, and
    stay attached and prepared; the others were detached and released."""

    msg_fmt = ('Detaching accelerator request(s) %(arqs)s from running '
               'instance %(instance)s failed: %(reason)s')


class DeviceError(OsAccException):
    """A device-half driver cannot do what it was asked; drivers raise it
    with the reason, and the caller adds which request it was for."""

    msg_fmt = '%(reason)s'


class FetchFailed(OsAccException):
    msg_fmt = ('Cannot read the accelerator requests of instance '
               '%(instance)s from Cyborg: %(reason)s')
