"""The swarm benchmark: a mock LLM provider, a swarm of agent hosts, and the
overhead benchmarks behind ``governor demo`` and ``governor bench``.

Needs the ``sim`` extra (aiohttp, matplotlib); nothing here is imported by
``import governor``, and the modules import their heavy dependencies
themselves, so ``governor.sim.cli`` can be loaded to register its commands
without them.

- :mod:`governor.sim.provider`: the mock provider (an aiohttp server).
- :mod:`governor.sim.scenario`: every knob of a swarm run.
- :mod:`governor.sim.host`: one host process: its agents and their strategy.
- :mod:`governor.sim.swarm`: the driver that runs each strategy in turn.
- :mod:`governor.sim.analysis`: goodput, 429 share, waits, fairness, recovery.
- :mod:`governor.sim.report`: the tables (compact and wide), the JSON file and the chart.
- :mod:`governor.sim.console`: the live progress line, and messages that never land in it.
- :mod:`governor.sim.bench`: the overhead benchmarks.
- :mod:`governor.sim.cli`: the click commands.
"""
