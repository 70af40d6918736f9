"""`python -m bubblewatch`."""

import sys

from bubblewatch.cli.main import main

sys.exit(main())
