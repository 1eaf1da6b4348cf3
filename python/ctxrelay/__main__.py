"""``python -m ctxrelay``: the ``ctxrelay`` command (:mod:`ctxrelay.apps.cli`), for
an environment where the console script is not on PATH."""
import sys

from ctxrelay.apps.cli.app import main

sys.exit(main())
