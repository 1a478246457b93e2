"""The environment gate_stack gives the processes of a flow."""
import os

from cyborg.tests.harness import gate_stack


def test_environment_is_the_tests_unbuffered(monkeypatch):
    monkeypatch.setenv('PYTHONPATH', '/src')
    found = gate_stack.environment()
    assert found == dict(os.environ, PYTHONUNBUFFERED='1')
    assert gate_stack.environment({}) == found


def test_extra_goes_over_it_and_pythonpath_first(monkeypatch):
    monkeypatch.setenv('PYTHONPATH', '/src')
    monkeypatch.setenv('CYBORG_NVML_DOUBLE', '/old.json')
    found = gate_stack.environment({'PYTHONPATH': '/shim',
                                    'CYBORG_NVML_DOUBLE': '/nvml.json'})
    assert found['PYTHONPATH'] == os.pathsep.join(['/shim', '/src'])
    assert found['CYBORG_NVML_DOUBLE'] == '/nvml.json'
    assert found['PYTHONUNBUFFERED'] == '1'
    # Nothing inherited: the extra alone.
    monkeypatch.delenv('PYTHONPATH')
    assert gate_stack.environment({'PYTHONPATH': '/shim'})[
        'PYTHONPATH'] == '/shim'


def test_process_and_agent_take_it(tmp_path, monkeypatch):
    monkeypatch.setenv('PYTHONPATH', '/src')
    stack = gate_stack.Stack(tmp_path, 'rabbit://', 'sqlite://',
                             'http://nova', 'token')
    agent = stack.add_agent('agent1', 'node', 0, 1,
                            env={'PYTHONPATH': '/shim', 'X_ONE': '1'})
    assert agent.env['PYTHONPATH'] == os.pathsep.join(['/shim', '/src'])
    assert agent.env['X_ONE'] == '1'
    # Callers that give none get what they had.
    other = stack.add_agent('agent2', 'node', 0, 1)
    assert other.env == dict(os.environ, PYTHONUNBUFFERED='1')
