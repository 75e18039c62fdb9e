"""The swarm benchmark: a mock LLM provider, a swarm of agent hosts, and the
overhead benchmarks behind ``python -m bench demo`` and ``python -m bench bench``.

Needs the ``bench`` extra (aiohttp, matplotlib); nothing here is imported by
``import governor``, and the modules import their heavy dependencies
themselves, so ``bench.cli`` can be loaded to register its commands
without them.

- :mod:`bench.provider`: the mock provider (an aiohttp server).
- :mod:`bench.scenario`: every knob of a swarm run.
- :mod:`bench.host`: one host process: its agents and their strategy.
- :mod:`bench.swarm`: the driver that runs each strategy in turn.
- :mod:`bench.analysis`: goodput, 429 share, waits, fairness, recovery.
- :mod:`bench.report`: the tables (compact and wide), the JSON file and the chart.
- :mod:`bench.console`: the live progress line, and messages that never land in it.
- :mod:`bench.bench`: the overhead benchmarks.
- :mod:`bench.cli`: the click commands.
"""
