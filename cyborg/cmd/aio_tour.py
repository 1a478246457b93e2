"""What cyborg-aio prints once started: its URLs and commands to paste."""
import dataclasses
import json
import uuid

from cyborg.cmd import aio_child
from cyborg.cmd import aio_glance
from cyborg.cmd import aio_placement

FUNCTION_PROFILE = 'fpga-demo-function'
_ADMIN = f"-H 'X-Auth-Token: {aio_child.TOKEN}'"
_JSON = "-H 'Content-Type: application/json'"


@dataclasses.dataclass
class Running:
    """What runs, and what the commands name."""

    api: str
    #: 'noauth' or 'keystone' ([api] auth_strategy).
    auth: str
    #: The compute node's name, as binds give it.
    hostname: str
    #: An FPGA's deployable: uuid, name and resource provider.
    deployable: str | None = None
    deployable_name: str | None = None
    rp_uuid: str | None = None
    placement: str | None = None
    #: The compute node's provider in placement.
    root: str | None = None
    glance: str | None = None
    #: The demo bitstream image in Glance.
    image: str | None = None
    #: The instance the printed bind is for: a new one each time, as
    #: all of an instance's requests are bound in one PATCH.
    instance: str = dataclasses.field(
        default_factory=lambda: str(uuid.uuid4()))


def text(run: Running) -> str:
    """The lines printed once everything answers."""
    admin = f'(the token "{aio_child.TOKEN}" is an administrator)'
    if run.auth == 'noauth':
        lines = [f'API: {run.api}  (no Keystone: the token '
                 f'"{aio_child.TOKEN}" is an administrator)']
    else:
        lines = [f'API: {run.api}  ([api] auth_strategy = {run.auth}: a '
                 'Keystone token; the commands below need one in place '
                 f'of "{aio_child.TOKEN}")']
    lines.append(f'Placement: {run.placement}  {admin}' if run.placement
                 else 'Placement: not running')
    if run.glance:
        lines.append(f'Glance: {run.glance}  {admin}; demo bitstream '
                     f'{aio_glance.DEMO_IMAGE_NAME} is image {run.image} '
                     f'(accel:function_id {aio_glance.DEMO_FUNCTION_ID})')
    else:
        lines.append('Glance: not running (programming an FPGA needs it)')
    lines += ['', 'Try:'] + [f'  {line}' for line in _commands(run)]
    return '\n'.join(lines) + '\n'


def _commands(run: Running) -> list[str]:
    api = run.api
    commands = [
        f'curl -s {_ADMIN} {api}/devices',
        f'openstack --os-auth-type admin_token --os-endpoint {api} \\',
        f'    --os-token {aio_child.TOKEN} accelerator device list']
    if run.placement and run.root:
        commands += [
            f"curl -s {_ADMIN} -H 'OpenStack-API-Version: placement "
            f"{aio_placement.MICROVERSION}' \\",
            f"    '{run.placement}/resource_providers?in_tree={run.root}'"]
    if run.glance and run.deployable:
        commands += [
            f'# Program FPGA {run.deployable_name} with the demo bitstream '
            'from Glance',
            f'curl -s {_ADMIN} {_JSON} -X PATCH \\',
            f'    {api}/deployables/{run.deployable}/program \\',
            '    -d \'[{"path": "/program", "op": "replace", "value": '
            f'[{{"image_uuid": "{run.image}"}}]}}]\'',
            '# or with the openstack CLI, which finds the image in Glance '
            'first',
            f'OS_IMAGE_ENDPOINT_OVERRIDE={run.glance} openstack \\',
            f'    --os-auth-type admin_token --os-endpoint {api} '
            f'--os-token {aio_child.TOKEN} \\',
            f'    accelerator deployable program {run.deployable} '
            f'{run.image}']
    if run.glance and run.rp_uuid:
        profile = {'name': FUNCTION_PROFILE, 'groups': [
            {'resources:FPGA': '1',
             'accel:function_id': aio_glance.DEMO_FUNCTION_ID}]}
        commands += [
            '# Ask for its function (accel:function_id): a device '
            'profile, an',
            '# accelerator request, bound to that FPGA for an instance',
            f'curl -s {_ADMIN} {_JSON} -X POST {api}/device_profiles \\',
            f"    -d '[{json.dumps(profile)}]'",
            f'ARQ=$(curl -s {_ADMIN} {_JSON} -X POST '
            f'{api}/accelerator_requests \\',
            f"    -d '{{\"device_profile_name\": \"{FUNCTION_PROFILE}\"}}' "
            '\\',
            "    | python3 -c 'import json, sys; "
            "print(json.load(sys.stdin)[\"arqs\"][0][\"uuid\"])')",
            f'curl -s {_ADMIN} {_JSON} -X PATCH {api}/accelerator_requests '
            '-d \'{"\'$ARQ\'": [',
            f'    {{"op": "add", "path": "/hostname", "value": '
            f'"{run.hostname}"}},',
            f'    {{"op": "add", "path": "/device_rp_uuid", "value": '
            f'"{run.rp_uuid}"}},',
            f'    {{"op": "add", "path": "/instance_uuid", "value": '
            f'"{run.instance}"}}]}}\'',
            f'curl -s {_ADMIN} {api}/accelerator_requests/$ARQ']
    return commands

