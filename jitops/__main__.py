# SPDX-License-Identifier: MIT
"""`python -m jitops run script.py|-m module [args]`: a program run with every
torch.utils.cpp_extension.load/load_inline going through jitops (jitops/compat/_drop_in.py).
`python -m jitops <command>`: the jitops-cache command."""

import sys

if sys.argv[1:2] == ["run"]:
    from jitops import _WORKING_FOLDER
    from jitops.compat._drop_in import run

    sys.exit(run(sys.argv[2:], _WORKING_FOLDER))

from jitops.cache_tools.__main__ import main  # type: ignore[import-not-found]  # installed from cache_tools/ (setup.cfg)

sys.exit(main(prog="python -m jitops"))
