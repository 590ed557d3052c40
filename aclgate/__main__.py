"""`python -m aclgate` is the same as the `aclgate` console script."""

import sys

from aclgate.proxy.cli import main

sys.exit(main())
