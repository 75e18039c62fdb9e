"""``python -m bench demo|bench|swarm|provider|worker``."""

from .cli import main

main()
