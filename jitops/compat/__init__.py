# SPDX-License-Identifier: MIT
"""The compat wing: torch's cpp_extension API on jitops. jitops.load and load_inline, the names
programs read from torch's module, the Python module names they create, and unmodified programs
(python -m jitops run, JITOPS_DROP_IN=1). Imports the wings below it and jitops.extension."""
