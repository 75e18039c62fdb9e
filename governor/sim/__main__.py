"""``python -m governor.sim demo|bench|swarm|provider|worker``."""

from .cli import main

main()
