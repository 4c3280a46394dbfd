# SPDX-License-Identifier: MIT
"""The build wing, imported on a miss only: the resolution order, one build (build file, ninja,
PCHs, the status line) and its publish. Imports the ground, the warm wing and the store wing."""
