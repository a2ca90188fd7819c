"""`python -m tilefoundry` is the `tilefoundry` command."""

from tilefoundry.cli import main

raise SystemExit(main())
