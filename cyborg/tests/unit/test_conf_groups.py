"""How cyborg.conf finds its option modules and builds their groups."""
import importlib
import pkgutil

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

from cyborg import conf as cyborg_conf
from cyborg.conf import groups
from cyborg.conf import keystone
from cyborg.conf import opts

_PASSWORD_OPTIONS = {
    o.dest for o in ks_loading.get_auth_plugin_conf_options('password')}


def _own_options(name: str) -> list[cfg.Opt]:
    return [cfg.StrOpt(name, help=f'{name} of the test')]


def test_option_modules_are_found_default_first():
    found = [m.__name__.rsplit('.', 1)[1]
             for m in cyborg_conf.option_modules()]
    assert found[0] == 'default'
    assert found[1:] == sorted(found[1:])
    for info in pkgutil.iter_modules(cyborg_conf.__path__):
        if info.name == 'opts':
            continue
        module = importlib.import_module(f'cyborg.conf.{info.name}')
        shape = (hasattr(module, 'register_opts'),
                 hasattr(module, 'list_opts'))
        # Half of the shape is a module the registration would miss, or
        # one that would fail in it.
        assert shape in ((True, True), (False, False)), info.name
        assert (info.name in found) == shape[0], info.name


def test_every_listed_group_is_registered():
    conf = cfg.ConfigOpts()
    cyborg_conf.register_opts(conf)
    for group, options in opts.list_opts():
        name = group if isinstance(group, str) else group.name
        section = conf if name == 'DEFAULT' else conf[name]
        missing = [o.dest for o in options if o.dest not in section]
        # The sample shows the password plugin's auth options; keystoneauth
        # registers those of the configured plugin when it loads it.
        assert set(missing) <= _PASSWORD_OPTIONS, (name, missing)


def test_a_group_registers_and_lists_its_options_in_order():
    group = groups.Group('widgets', 'Widget options', 'Widgets.',
                         _own_options('a') + _own_options('b'))
    conf = cfg.ConfigOpts()
    group.register_opts(conf)
    assert list(conf.widgets) == ['a', 'b']
    [(listed, options)] = group.list_opts().items()
    assert (listed.name, listed.title, listed.help) == (
        'widgets', 'Widget options', 'Widgets.')
    assert [o.dest for o in options] == ['a', 'b']


def test_a_driver_group_has_its_own_then_the_lifecycle_options():
    group = groups.driver_group(
        'widgets', 'Widget options', 'Widgets.', family='widgets of w',
        clean_how='they are wiped', opts=_own_options('a'))
    [options] = group.list_opts().values()
    assert [o.dest for o in options] == ['a', 'clean_after_use',
                                         'vfio_bind']
    assert 'the widgets of w after' in options[1].help
    assert '(they are wiped)' in options[1].help
    assert 'the widgets of w lend' in options[2].help


def test_a_driver_group_of_mdevs_ends_with_the_mdev_creator():
    group = groups.driver_group(
        'widgets', 'Widget options', 'Widgets.', family='widgets',
        clean_how='they are wiped', mdevs='vwidgets of w')
    [options] = group.list_opts().values()
    assert [o.dest for o in options] == ['clean_after_use', 'vfio_bind',
                                         'mdev_creator']
    assert 'mediated devices of the vwidgets of w.' in options[2].help


def test_a_service_client_group_is_its_own_then_keystoneauth():
    group = keystone.ServiceClientGroup(
        'widgets', 'Widget options', 'Widgets.', _own_options('a'),
        service_type='widget')
    [(listed, options)] = group.list_opts().items()
    dests = [o.dest for o in options]
    assert dests[0] == 'a'
    assert len(dests) == len(set(dests))
    assert {'auth_type', 'auth_url', 'password', 'cafile', 'timeout',
            'service_type', 'valid_interfaces'} <= set(dests)
    conf = cfg.ConfigOpts()
    group.register_opts(conf)
    conf([], default_config_files=[])
    assert conf.widgets.a is None
    assert conf.widgets.service_type == 'widget'
    assert conf.widgets.valid_interfaces == list(keystone.INTERFACES)
    assert conf.widgets.timeout == keystone.TIMEOUT


def test_each_conf_gets_a_service_client_group_of_its_own():
    # keystoneauth adds the loaded auth plugin's options to the OptGroup
    # registered: a shared one would carry them into every ConfigOpts.
    group = keystone.ServiceClientGroup(
        'widgets', 'Widget options', 'Widgets.', _own_options('a'),
        service_type='widget')
    first, second = cfg.ConfigOpts(), cfg.ConfigOpts()
    group.register_opts(first)
    group.register_opts(second)
    registered = [c._get_group('widgets') for c in (first, second)]
    assert registered[0] is not registered[1]
    assert group.group not in registered
    assert [(g.title, g.help) for g in registered] == [
        ('Widget options', 'Widgets.')] * 2
