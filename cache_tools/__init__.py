# SPDX-License-Identifier: MIT
"""`jitops-cache`: inspect and clean jitops' build cache. Never triggers a build.

Installed as `jitops.cache_tools`; in a checkout `python -m cache_tools` runs it too.
"""
