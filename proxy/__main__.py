"""`python -m proxy` is the same as the `aclgate` console script."""

import sys

from proxy.cli import main

sys.exit(main())
