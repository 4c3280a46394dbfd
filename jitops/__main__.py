# SPDX-License-Identifier: MIT
"""`python -m jitops`: the jitops-cache command."""

import sys

from jitops.cache_tools.__main__ import main

sys.exit(main())
