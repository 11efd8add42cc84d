"""``python -m pipelines.cli``: the ``duet`` command line."""

from pipelines.cli.commands import main

main()
