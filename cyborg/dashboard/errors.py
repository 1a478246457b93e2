"""The API's refusals, shown to the user as the API words them."""
from typing import Any

from horizon import exceptions

from cyborg.dashboard import api


def show(request: Any, error: api.ApiError,
         redirect: str | None = None) -> None:
    """Show the API's sentence unchanged, from the ``except`` block that
    caught ``error``, and go to ``redirect`` when one is given (Horizon
    raises a redirect for it).

    Horizon takes an exception handled with a message as recoverable
    (``exceptions.handle``): the message is shown on the next page and
    the view goes on. ``details=''``: Horizon would append the
    exception's text, the same sentence, a second time.
    """
    exceptions.handle(request, error.message, redirect=redirect,
                      details='')
