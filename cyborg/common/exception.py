"""cyborg's exceptions: one base class with a message format and an HTTP code.

The REST API maps ``code`` to the response status in one place; RPC servers
list the classes they may raise so that callers receive them as they are.
"""
from typing import Any


class CyborgException(Exception):
    """Base class: ``msg_fmt`` is filled in with the keyword arguments."""

    msg_fmt = 'An unknown error occurred.'
    code = 500

    def __init__(self, message: str | None = None, **kwargs: Any) -> None:
        self.kwargs = kwargs
        if message is None:
            try:
                message = self.msg_fmt % kwargs
            except (KeyError, TypeError):
                # A caller passed the wrong arguments; keep the template
                # rather than hiding the original error behind this one.
                message = self.msg_fmt
        self.message = message
        super().__init__(message)


class Invalid(CyborgException):
    msg_fmt = 'Invalid input: %(reason)s'
    code = 400


class InvalidReport(Invalid):
    msg_fmt = 'Invalid device report from host %(host)s: %(reason)s'


class NotFound(CyborgException):
    msg_fmt = 'The resource could not be found.'
    code = 404


class Conflict(CyborgException):
    msg_fmt = 'Conflict: %(reason)s'
    code = 409


class ReportConflict(Conflict):
    msg_fmt = ('The device report from host %(host)s conflicts with what '
               'another host reported: %(reason)s')


class DriverNotFound(CyborgException):
    msg_fmt = ('Unknown accelerator driver(s) in [agent] enabled_drivers: '
               '%(names)s. Available drivers: %(available)s.')


class DriverError(CyborgException):
    msg_fmt = 'Driver %(driver)s failed: %(reason)s'


class DBNotReachable(CyborgException):
    msg_fmt = 'Cannot reach the database at %(url)s: %(reason)s'
