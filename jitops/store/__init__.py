# SPDX-License-Identifier: MIT
"""The store wing: the cache on disk and the tiers behind it. Its root, entries, budget, locks and
usage records; the key that names an entry; the object store; prebuilt folders; the remote tier
and its signed records. Imports the ground modules and the warm wing."""
