# SPDX-License-Identifier: MIT
"""The warm wing: all a process that uses a library runs, with no subprocess and no key computed
(checks, one dlopen, registry, namespace guard, warm records). Imports only the ground modules."""
