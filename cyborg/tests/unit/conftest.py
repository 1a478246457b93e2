"""Fixtures of the driver tests: a sysfs tree, a host reading it, and
the emulated kernel acting on its writes."""
import pytest

from cyborg.tests.harness import sysfs_kernel
from cyborg.tests.harness.sysfs import SysfsTree


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


@pytest.fixture
def kernel(tree):
    """The emulated kernel (``sysfs_kernel``) following ``tree``'s writes,
    in a thread, for the test's length."""
    with sysfs_kernel.Kernel(tree.root) as kernel:
        yield kernel
