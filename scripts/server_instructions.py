"""Moved to ``governor bench --instructions`` (governor/sim/instructions.py); this runs it, e.g. --calls 200."""

import sys

from governor.sim.cli import bench_command

bench_command(["--instructions", *sys.argv[1:]])
