"""Every call a client sends, at the version it pins, is served by its
server's endpoints; and the servers serve just those calls."""
import ast
import inspect
from typing import Any

import pytest

from cyborg.agent import manager as agent_manager
from cyborg.agent import rpcapi as agent_rpcapi
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import rpcapi as conductor_rpcapi


def _version(node: ast.expr) -> tuple[int, int] | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        major, dot, minor = node.value.partition('.')
        if dot and major.isdigit() and minor.isdigit():
            return int(major), int(minor)
    return None


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _sent(function: ast.FunctionDef) -> list[tuple[str, tuple[int, int]]]:
    """The (RPC method, version) pairs a client method sends: through
    ``_call``/``_call_newer`` (a version, then the method's name, among
    the positional arguments) or ``client.prepare(version=...)`` and a
    ``cast``/``call`` of the prepared context."""
    sent = []
    prepared = None
    for call in ast.walk(function):
        if not (isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)):
            continue
        attr = call.func.attr
        if attr in ('_call', '_call_newer'):
            versions = [i for i, a in enumerate(call.args) if _version(a)]
            index = versions[0]
            sent.append((_name(call.args[index + 1]),
                         _version(call.args[index])))
        elif attr == 'prepare':
            prepared = next(_version(k.value) for k in call.keywords
                            if k.arg == 'version')
        elif attr in ('cast', 'call') and prepared is not None:
            sent.append((_name(call.args[1]), prepared))
    return sent


def _client_calls(cls: type) -> dict[str, dict[str, tuple[int, int]]]:
    """For each public method of the client class: the RPC methods it
    sends, each at the highest version it pins (the one it sends under
    no ``[upgrade_levels]`` cap)."""
    tree = ast.parse(inspect.getsource(inspect.getmodule(cls)))
    [body] = [n for n in tree.body
              if isinstance(n, ast.ClassDef) and n.name == cls.__name__]
    calls: dict[str, dict[str, tuple[int, int]]] = {}
    for function in body.body:
        if (isinstance(function, ast.FunctionDef)
                and not function.name.startswith('_')):
            pinned: dict[str, tuple[int, int]] = {}
            for method, version in _sent(function):
                pinned[method] = max(version, pinned.get(method, version))
            calls[function.name] = pinned
    return calls


def _served(endpoints: list[Any]) -> dict[str, list[Any]]:
    """RPC method name -> the endpoints that have it (their public
    attributes other than ``target``, as the dispatcher's default access
    policy exposes them)."""
    served: dict[str, list[Any]] = {}
    for endpoint in endpoints:
        for name in dir(endpoint):
            if not name.startswith('_') and name != 'target':
                served.setdefault(name, []).append(endpoint)
    return served


def _parse(version: str) -> tuple[int, int]:
    major, minor = version.split('.')
    return int(major), int(minor)


def _conductor_endpoints(conf) -> list[Any]:
    return conductor_manager.ConductorManager(conf).endpoints()


def _agent_endpoints(conf) -> list[Any]:
    return agent_manager.AgentManager(conf, None, None,
                                      glance=object()).endpoints()


@pytest.mark.parametrize('client,endpoints,helpers', [
    (conductor_rpcapi.ConductorAPI, _conductor_endpoints,
     {'can_send_version'}),
    (agent_rpcapi.AgentAPI, _agent_endpoints, set())])
def test_every_pinned_call_is_served(conf, client, endpoints, helpers):
    calls = _client_calls(client)
    # Each public method but the helpers sends something: the
    # introspection missed none.
    assert {name for name, sent in calls.items() if not sent} == helpers
    latest = _parse(client.RPC_API_VERSION)
    served = _served(endpoints(conf))
    sent = {}
    for pinned in calls.values():
        for method, version in pinned.items():
            sent[method] = max(version, sent.get(method, version))
    for method, version in sent.items():
        assert version[0] == latest[0] and version <= latest, method
        [endpoint] = served[method]
        served_version = _parse(endpoint.target.version)
        assert served_version[0] == version[0], method
        assert served_version >= version, method
    # The servers serve what the clients send, once each, and nothing
    # else (no helper or collaborator reachable over RPC).
    assert set(served) == set(sent)


@pytest.mark.parametrize('client,endpoints', [
    (conductor_rpcapi.ConductorAPI, _conductor_endpoints),
    (agent_rpcapi.AgentAPI, _agent_endpoints)])
def test_every_endpoint_serves_the_clients_version(conf, client, endpoints):
    """One version for all the endpoints of a server: the dispatcher
    answers UnsupportedVersion, which clients fall back on, only when no
    endpoint's version is compatible."""
    assert {e.target.version for e in endpoints(conf)} == {
        client.RPC_API_VERSION}
