import sys

from midword.cli import main

sys.exit(main())
