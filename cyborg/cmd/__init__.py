"""Console entry points; importing this package selects native threads."""
from oslo_service import backend

# Before anything else imports oslo.service: cyborg runs on native threads.
backend.init_backend(backend.BackendType.THREADING)
