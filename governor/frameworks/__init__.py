"""The fleet's limit inside the agent frameworks: one thin module per framework.

Each module builds on the governed clients of :mod:`governor.providers` and
is installed by its own extra; the frameworks are imported when a module is,
never on ``import governor``. docs/frameworks.md shows each one at work.
"""
