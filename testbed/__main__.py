"""`python -m testbed` is the `testbed` command."""

from testbed.cli import main

main()
