"""tests/compiled runs only on a build (``GPUADVISOR_TEST_BUILD``, the second run of ``make
test``): on the sources there is no compiled module to check."""

import os

collect_ignore_glob = [] if os.environ.get("GPUADVISOR_TEST_BUILD") else ["test_*.py"]
