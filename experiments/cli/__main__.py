"""``python -m flashtune.experiments.cli.main``: the same as the ``flashtune`` command."""

import sys

from flashtune.experiments.cli.main import main

sys.exit(main())
