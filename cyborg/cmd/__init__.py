"""Console entry points; importing this package selects native threads."""
import warnings

# futurist imports eventlet whenever it is installed (oslo.service still
# depends on it) and eventlet then warns about itself; cyborg never uses it.
warnings.filterwarnings('ignore', message=r'\s*Eventlet is deprecated')

from oslo_service import backend  # noqa: E402

# Before anything else imports oslo.service: cyborg runs on native threads.
backend.init_backend(backend.BackendType.THREADING)
