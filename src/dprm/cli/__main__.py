"""``python -m dprm.cli``: the ``dprm`` program."""

import sys

from dprm.cli import main

sys.exit(main())
