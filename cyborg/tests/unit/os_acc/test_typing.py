"""os-acc, which nova-compute imports, passes ``mypy --strict``.

Only os-acc's own modules are held to it: errors in the parts of cyborg
it imports are not reported here.
"""
import os
import subprocess
import sys

import cyborg
from cyborg.tests import conftest


def test_mypy_strict(tmp_path):
    conftest.require_module('mypy')
    root = os.path.dirname(os.path.dirname(cyborg.__file__))
    done = subprocess.run(
        [sys.executable, '-m', 'mypy', '--strict', '--follow-imports=silent',
         '--cache-dir', str(tmp_path / 'mypy-cache'), 'cyborg/os_acc'],
        cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
