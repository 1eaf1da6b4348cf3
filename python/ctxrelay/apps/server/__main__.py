"""``python -m ctxrelay.apps.server``."""
import sys

from .cli import main

sys.exit(main())
