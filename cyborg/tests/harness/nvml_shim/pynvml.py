"""``pynvml`` for a process on a host without an NVIDIA GPU: the NVML
double (cyborg.tests.harness.nvml_double) over the state file that
$CYBORG_NVML_DOUBLE names. Put this directory first on the process's
PYTHONPATH (cyborg/tests/README)."""
import os
import sys

from cyborg.tests.harness import nvml_double

sys.modules[__name__] = nvml_double.module(os.environ[nvml_double.ENV])
