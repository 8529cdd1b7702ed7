"""`python -m specfsm.cli ...`: the `specfsm` command."""

from specfsm.cli.main import main

raise SystemExit(main())
