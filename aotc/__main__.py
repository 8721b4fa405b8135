"""`python -m aotc` runs the command-line interface."""

from aotc.cli.main import main

main()
