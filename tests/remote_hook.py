# SPDX-License-Identifier: MIT
"""A third party's remote cache backend, as test_remote plugs it in: JITOPS_REMOTE_CACHE=remote_hook:SharedFolder."""

import os

from jitops.remote import FolderBackend


class SharedFolder(FolderBackend):
    """A folder named by its own setting (HOOK_FOLDER), as an S3 backend would read its bucket's."""

    def __init__(self, url: str, timeout: float):
        super().__init__("file://" + os.environ["HOOK_FOLDER"], timeout)
