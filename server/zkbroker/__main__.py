"""`python -m server.zkbroker --zookeeper HOST:PORT --config FILE`: see server/zkbroker/cli.py."""

import sys

from server.zkbroker.cli import main

sys.exit(main())
