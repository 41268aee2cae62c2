"""``python -m deploy``: the same as ``fltest-deploy``."""

import sys

from deploy.cli import main

sys.exit(main())
