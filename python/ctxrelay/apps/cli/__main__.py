"""``python -m ctxrelay.apps.cli``: the same as the ``ctxrelay`` console script."""
import sys

from ctxrelay.apps.cli.app import main

sys.exit(main())
