"""``python -m gpuadvisor``."""

import sys

from gpuadvisor.cli import main

sys.exit(main())
