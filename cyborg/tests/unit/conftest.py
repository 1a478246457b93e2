"""Fixtures of the driver tests: a sysfs tree and a host reading it."""
import pytest

from cyborg.tests.sysfs import SysfsTree


@pytest.fixture
def tree(tmp_path):
    """An empty sysfs tree laid out as the kernel's (add functions)."""
    return SysfsTree(tmp_path)


@pytest.fixture
def host_conf(conf, tree):
    """The configuration of host ``cmp1`` whose sysfs is ``tree``."""
    conf.set_override('host', 'cmp1')
    conf.set_override('sysfs_root', tree.root, 'agent')
    return conf
