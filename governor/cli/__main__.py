"""``python -m governor.cli``: the ``governor`` command."""

from . import main

main()
