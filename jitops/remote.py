# SPDX-License-Identifier: MIT
"""The remote cache's backend interface, for a backend of one's own (an S3 bucket, an HTTP store):
subclass Backend, implement its five methods, and set JITOPS_REMOTE_CACHE=module:Class
(docs/cache.md, "Remote cache")."""

from .store import Backend, FolderBackend, RedisBackend, Unreadable

__all__ = ["Backend", "FolderBackend", "RedisBackend", "Unreadable"]
