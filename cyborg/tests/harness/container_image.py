"""cyborg's container image (the tree's Containerfile), built and run
with podman, for tests.

The machine needs no container registry: the base is made from Debian's
packages (``base``: mmdebstrap, bookworm's minbase with python3 and its
venv module) and imported into podman's store, then the Containerfile is
built on it (``build``, ``--build-arg BASE=``). Its pip steps reach the
package index through the host's network.

podman runs as root with a configuration of the test's own
(``podman_env``, CONTAINERS_CONF), for machines like the CI's, where
crun cannot run ("cgroups in hybrid mode not supported": runc and
cgroupfs can) and the sandbox may not raise the rlimits podman would
ask for (RLIMIT_NOFILE 1048576: "setrlimit: Operation not permitted").

Debian's podman, runc and mmdebstrap are installed through
system_packages when missing; a machine where they cannot be (not root,
not Debian), or where the base or the image cannot be built (no
Debian mirror or package index), skips the tests, or fails them under
CYBORG_TEST_REQUIRE_SERVICES=1.
"""
import datetime
import fcntl
import hashlib
import os
import pathlib
import shutil
import subprocess

from cyborg.tests.conftest import unavailable
from cyborg.tests.harness import packaging
from cyborg.tests.harness import system_packages

ROOT = packaging.ROOT
CONTAINERFILE = ROOT / 'Containerfile'
# The host's CA certificates: copied into the base's store
# (SYSTEM_CAS), so that pip in the build trusts what the host trusts (a
# TLS-inspecting proxy's CA).
LOCAL_CAS = pathlib.Path('/usr/local/share/ca-certificates')
# Where the base's root file system is kept between runs, one tarball a
# day: making it takes about 4 minutes (mostly downloads), importing it
# 14 s (2026-11-28, the two-core machine).
SYSTEM_CAS = '/etc/ssl/certs/ca-certificates.crt'
CACHE_DIR = pathlib.Path('/var/tmp')
CACHE_PREFIX = 'cyborg-test-base-'
BASE_REPO = 'localhost/cyborg-test-base'
IMAGE = 'localhost/cyborg-test:latest'
# Seconds for making the base, and for building the image (the
# dependencies from the index: about 2 minutes with nothing cached).
BOOTSTRAP_TIMEOUT = 900
BUILD_TIMEOUT = 900
# What the base holds besides minbase; python3-venv for "python3 -m
# venv", which the Containerfile runs, and ca-certificates for the
# index's.
BASE_PACKAGES = 'python3,python3-venv,ca-certificates'
# podman's configuration: runc with cgroupfs, which run here, rlimits
# under the sandbox's hard ones (20,000 files and 96,364 processes on the
# CI machine; podman as root asks for more), and the host's
# network for every container and build step (no CNI or netavark setup;
# the services reach MariaDB and RabbitMQ on 127.0.0.1).
# containers.conf(5).
CONTAINERS_CONF = '''\
[containers]
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]
netns = "host"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
'''


def podman_env(workdir: pathlib.Path) -> dict[str, str]:
    """The environment podman runs in: the tools installed, the
    configuration above written to ``workdir``."""
    if os.geteuid() != 0:
        unavailable('podman', 'the image tests run podman as root')
    system_packages.debian('podman', 'runc', 'mmdebstrap')
    conf = workdir / 'containers.conf'
    conf.write_text(CONTAINERS_CONF)
    return dict(os.environ, CONTAINERS_CONF=str(conf))


def podman(env: dict[str, str], *args: str, timeout: float = 120,
           check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(['podman', *args], env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)
    if check:
        assert done.returncode == 0, (
            f'podman {" ".join(args)}:\n{done.stdout}{done.stderr}')
    return done


def _cas_key() -> str:
    """Which CA certificates the base was made with."""
    digest = hashlib.sha256()
    for cert in sorted(LOCAL_CAS.glob('*.crt')):
        digest.update(cert.name.encode() + cert.read_bytes())
    return digest.hexdigest()[:12]


def _bootstrap(tarball: pathlib.Path) -> None:
    """bookworm's minbase with BASE_PACKAGES and the host's CAs, as a
    tarball of its root file system."""
    partial = tarball.with_suffix('.partial.tar')
    argv = ['mmdebstrap', '--variant=minbase', f'--include={BASE_PACKAGES}']
    if LOCAL_CAS.is_dir():
        argv += [f'--customize-hook=copy-in {LOCAL_CAS} /usr/local/share',
                 '--customize-hook=chroot "$1" update-ca-certificates']
    done = subprocess.run([*argv, 'bookworm', str(partial)],
                          capture_output=True, text=True,
                          timeout=BOOTSTRAP_TIMEOUT, check=False)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        unavailable('a bookworm base image',
                    f'mmdebstrap failed: {done.stderr[-800:]}')
    partial.rename(tarball)


def base(env: dict[str, str]) -> str:
    """The tag of the base image, made (or taken from the day's cache)
    and imported on first use."""
    key = f'{datetime.date.today():%Y%m%d}-{_cas_key()}'
    tag = f'{BASE_REPO}:{key}'
    with open(CACHE_DIR / f'{CACHE_PREFIX}lock', 'a') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if podman(env, 'image', 'exists', tag, check=False).returncode == 0:
            return tag
        tarball = CACHE_DIR / f'{CACHE_PREFIX}{key}.tar'
        if not tarball.exists():
            # Yesterday's tarballs and images go: one day's is kept.
            for old in CACHE_DIR.glob(f'{CACHE_PREFIX}*.tar'):
                old.unlink()
            _bootstrap(tarball)
        # Debian's own pip reads the system's CA store; the pip of a venv
        # made by ensurepip reads certifi's, unless PIP_CERT names another.
        podman(env, 'import', '--change', f'ENV PIP_CERT={SYSTEM_CAS}',
               str(tarball), tag, timeout=300)
    return tag


def build(env: dict[str, str], base_tag: str) -> str:
    """The image of the tree's Containerfile on ``base_tag``; podman's
    layer cache keeps the dependencies' layer while requirements.txt and
    the base stay the same."""
    if shutil.which('podman') is None:
        unavailable('podman', 'not installed')
    done = subprocess.run(
        ['podman', 'build', '--network', 'host', '--build-arg',
         f'BASE={base_tag}', '--file', str(CONTAINERFILE), '--tag', IMAGE,
         str(ROOT)],
        env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT,
        check=False)
    if done.returncode != 0:
        output = done.stdout + done.stderr
        # pip's words when no index answers: a requirement that no
        # release satisfies names the versions there are instead.
        if '(from versions: none)' in output:
            unavailable('the package index', output[-800:])
        raise AssertionError(f'podman build failed:\n{output[-4000:]}')
    return IMAGE
