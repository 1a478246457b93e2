"""Benchmark of RPC payload conversion: cyborg's fast path against oslo's.

Every RPC argument and reply goes through ``cyborg.common.rpc.to_primitive``
before oslo.messaging serialises it to JSON. It converts the dicts, lists
and scalars that make up nearly every payload itself and hands anything
else to ``oslo_serialization.jsonutils.to_primitive(convert_instances=True)``,
which tests every item against a dozen types. This times both on the
payloads cyborg sends, alternating them pass by pass, and prints the CPU
microseconds per payload (median of ``--passes``):

``arq``
    one accelerator request as the conductor returns it (a create's reply).
``bind``
    a bind's reply: the three ARQs of an instance.
``report``
    an agent's report of ``--devices`` fake devices (4 deployables each).

    python tools/bench/serialize.py [--devices 8] [--passes 30]
"""
import argparse
import datetime
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from oslo_serialization import jsonutils

import cyborg.cmd  # noqa: F401  (native threads first)
from cyborg import conf as cyborg_conf
from cyborg.accelerator.drivers import fake
from cyborg.common import rpc


def _arq() -> dict[str, Any]:
    now = datetime.datetime(2026, 11, 24, 12, 0, 0)
    return {
        'uuid': str(uuid.uuid4()), 'state': 'Bound',
        'device_profile_name': 'fpga-dp', 'device_profile_group_id': 0,
        'device_profile_group': {'resources:FPGA': '1',
                                 'trait:CUSTOM_FPGA_INTEL': 'required'},
        'hostname': 'compute-1', 'device_rp_uuid': str(uuid.uuid4()),
        'instance_uuid': str(uuid.uuid4()), 'project_id': 'a' * 32,
        'attach_handle_type': 'PCI', 'attach_handle_uuid': str(uuid.uuid4()),
        'attach_handle_info': {'domain': '0000', 'bus': 'af',
                               'device': '00', 'function': '1'},
        'created_at': now, 'updated_at': now,
    }


def _report(devices: int) -> dict[str, Any]:
    conf = cyborg_conf.CONF
    conf([], project='cyborg', default_config_files=[])
    conf.set_override('host', 'compute-1')
    conf.set_override('device_count', devices, 'fake_driver')
    return {'hostname': 'compute-1',
            'devices': [d.to_dict() for d in fake.FakeDriver(conf).discover()]}


def _oslo(value: Any) -> Any:
    return jsonutils.to_primitive(value, convert_instances=True)


def _per_call(func: Callable[[Any], Any], payload: Any, calls: int) -> float:
    start = time.process_time()
    for _ in range(calls):
        func(payload)
    return (time.process_time() - start) / calls * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--devices', type=int, default=8)
    parser.add_argument('--passes', type=int, default=30)
    args = parser.parse_args(argv)
    payloads = {'arq': _arq(), 'bind': [_arq() for _ in range(3)],
                'report': _report(args.devices)}
    for name, payload in payloads.items():
        # The same result, or the comparison means nothing.
        assert jsonutils.dumps(rpc.to_primitive(payload)) == (
            jsonutils.dumps(_oslo(payload)))
        calls = max(10, 20000 // len(jsonutils.dumps(_oslo(payload))))
        ours, theirs = [], []
        for _ in range(args.passes):
            ours.append(_per_call(rpc.to_primitive, payload, calls))
            theirs.append(_per_call(_oslo, payload, calls))
        print(f'{name:7} cyborg {statistics.median(ours):8.1f} us   '
              f'oslo {statistics.median(theirs):8.1f} us   '
              f'x{statistics.median(theirs) / statistics.median(ours):.1f}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
