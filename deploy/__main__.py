"""``python -m deploy``: the same as ``fltest-deploy``."""

import sys

from deploy.commands.fltest_deploy import main

sys.exit(main())
