"""`python -m midword.server`: the same as `midword serve`."""

import sys

from .cli import main

sys.exit(main())
