# SPDX-License-Identifier: MIT
"""jitops' ops, one module each: its Extension, public function, checks, fake kernel, autograd and
pure-torch <op>_ref (docs/ARCHITECTURE.md: adding an op). What they share is in _framework, which
is private: the public names are jitops.<op>, jitops.load_all and jitops.available_ops."""
