"""RPC endpoint of deployables: programming an FPGA (1.2)."""
import logging
from collections.abc import Callable
from typing import Any

import oslo_messaging as messaging
from oslo_config import cfg

from cyborg import context as cyborg_context
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.common import exception
from cyborg.common import notifications
from cyborg.conductor.endpoints import TARGET
from cyborg.db.api import deployables

LOG = logging.getLogger(__name__)

Context = cyborg_context.RequestContext


class DeployableEndpoint:
    """Programs a deployable through its agent."""

    target = TARGET

    def __init__(self, conf: cfg.ConfigOpts,
                 agent_api: Callable[[], agent_rpcapi.AgentAPI],
                 notifier: notifications.Notifier) -> None:
        self._conf = conf
        self._agent_api = agent_api
        self._notifier = notifier

    @messaging.expected_exceptions(exception.CyborgException)
    def deployable_program(self, context: Context, uuid: str,
                           image_uuid: str) -> None:
        """Load a Glance image onto an idle FPGA through its agent.

        The deployable is taken for programming first (a conditional
        UPDATE; DeployableBusy while any of its handles is in use or
        another programming runs), so that no bind lands on it until the
        programming has ended; binds that arrive meanwhile wait for it.
        """
        target = deployables.begin_program(context, uuid, image_uuid)
        program = {'deployable_uuid': uuid, 'deployable_name': target['name'],
                   'host': target['host'],
                   'driver_name': target['driver_name'],
                   'image_uuid': image_uuid, 'arq_uuids': []}
        self._notifier.program_start(context, program)
        try:
            self._program(context, uuid, image_uuid, target)
        except Exception as exc:
            # _program has ended the programming in the database.
            self._notifier.program_error(context, program, str(exc))
            raise
        self._notifier.program_end(context, program)
        LOG.info('Deployable %s programmed with image %s.', uuid,
                 image_uuid)

    def _program(self, context: Context, uuid: str, image_uuid: str,
                 target: dict[str, Any]) -> None:
        """Have the agent load the image; end the programming begun."""
        # Until the agent has answered, the device's content is unknown.
        loaded: bool | None = False
        try:
            self._agent_api().program_fpga(
                context, target['host'], target['cpid_info'],
                target['name'], target['driver_name'], image_uuid,
                timeout=float(self._conf.conductor.bind_timeout))
            loaded = True
        except exception.NotSupported:
            loaded = None
            raise exception.ProgramNotSupported(
                uuid=uuid, driver=target['driver_name']) from None
        except exception.BitstreamNotFound as exc:
            loaded = None
            raise exception.Invalid(reason=f'image_uuid: {exc}') from None
        except exception.BitstreamError as exc:
            loaded = None
            raise exception.ProgramFailed(uuid=uuid, reason=exc) from None
        except exception.DeviceActionError as exc:
            raise exception.ProgramFailed(uuid=uuid, reason=exc) from None
        finally:
            deployables.finish_program(context, target['id'], image_uuid,
                                       loaded)
