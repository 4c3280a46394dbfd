# SPDX-License-Identifier: MIT
"""`jitops-cache`: inspect and clean jitops' build cache. Never triggers a build.

Installed as `jitops.cache_tools`; in a checkout `python -m cache_tools` runs it too. The
arguments are in __main__.py, the commands in reading.py, removing.py and building.py, what they
select in selection.py, how they print in output.py; inventory.py reads a cache root, registry.py
finds every package's extensions, doctor.py reports the environment.
"""
