# SPDX-License-Identifier: MIT
"""The compat wing: torch's cpp_extension API on jitops (load, load_inline, torch's helpers, module
names, unmodified programs). Imports the wings below it and jitops.extension."""
