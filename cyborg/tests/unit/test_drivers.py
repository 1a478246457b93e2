"""Loading drivers by name."""
import pytest

from cyborg.accelerator import drivers
from cyborg.accelerator.drivers import fake
from cyborg.common import exception


def test_fake_driver_is_available():
    assert 'fake_driver' in drivers.available_drivers()


def test_enabled_drivers_are_loaded_once_in_order(conf):
    conf.set_override('enabled_drivers', ['fake_driver', 'fake_driver'],
                      'agent')
    loaded = drivers.load_drivers(conf)
    assert [type(d) for d in loaded] == [fake.FakeDriver]


def test_unknown_driver_names_are_all_reported(conf):
    conf.set_override('enabled_drivers', ['fake_driver', 'nope', 'gpu'],
                      'agent')
    with pytest.raises(exception.DriverNotFound) as err:
        drivers.load_drivers(conf)
    message = str(err.value)
    assert 'nope, gpu' in message
    assert 'fake_driver' in message
