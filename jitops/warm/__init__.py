# SPDX-License-Identifier: MIT
"""The warm wing: what every process that uses a library runs, with no subprocess and no key
computed. A library's ABI, its checks and its opening (one lazy dlopen), the registry of loaded
libraries, the namespace guard run before every dlopen, and warm records. Imports only the ground
modules (jitops._errors, _layout, _flock, _torch_private)."""
