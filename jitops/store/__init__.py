# SPDX-License-Identifier: MIT
"""The store wing: the cache on disk and the tiers behind it (entries, budget, locks, key, objects,
prebuilt folders, the remote tier). Imports the ground and the warm wing."""
