"""`python -m quantgate.cli`: the same as the `quantgate` console command."""

import sys

from quantgate.cli import main

sys.exit(main())
