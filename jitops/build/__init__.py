# SPDX-License-Identifier: MIT
"""The build wing: imported on a miss only. The loader's resolution order, one build (its build
file, ninja, precompiled headers, the status line) and the publish into the store. Imports the
ground modules, the warm wing and the store wing."""
