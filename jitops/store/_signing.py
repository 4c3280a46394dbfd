# SPDX-License-Identifier: MIT
"""Ed25519 signatures of the remote cache's records (the `remote` extra's `cryptography`). A signed
body names its lookup key and every blob's sha256, so a signature cannot be replayed elsewhere."""

from __future__ import annotations

import base64
import os
from pathlib import Path

from .._errors import CacheError

PUBLIC_PREFIX = "ed25519:"


def _crypto():
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ed25519
    except ImportError:
        raise CacheError(
            "jitops: signing or checking remote cache entries needs the `cryptography` package: pip install 'jitops[remote]'"
        ) from None
    return ed25519, serialization


def public_text(raw: bytes) -> str:
    return PUBLIC_PREFIX + base64.b64encode(raw).decode()


def parse_public(text: str, setting: str = "JITOPS_REMOTE_TRUSTED_KEYS") -> bytes:
    """The 32 bytes of an `ed25519:<base64>` public key; CacheError naming the setting otherwise."""
    text = text.strip()
    try:
        raw = base64.b64decode(text.removeprefix(PUBLIC_PREFIX), validate=True)
    except ValueError:
        raw = b""
    if not text.startswith(PUBLIC_PREFIX) or len(raw) != 32:
        raise CacheError(f"jitops: {setting}: {text[:60]!r} is not a public key (`ed25519:` and 32 bytes in base64)")
    return raw


def trusted_keys(value: str) -> set[bytes]:
    """The keys JITOPS_REMOTE_TRUSTED_KEYS names: public keys, or files holding them, separated by
    commas or white space."""
    keys = set()
    for item in value.replace(",", " ").split():
        if not item.startswith(PUBLIC_PREFIX):
            try:
                item = Path(item).read_text().strip()
            except OSError as err:
                raise CacheError(
                    f"jitops: JITOPS_REMOTE_TRUSTED_KEYS: {item!r} is neither a public key nor a readable file ({err.strerror})"
                ) from None
        keys.add(parse_public(item))
    return keys


class Signer:
    """A private key read from a PEM file (JITOPS_REMOTE_SIGNING_KEY)."""

    def __init__(self, path: str):
        ed25519, serialization = _crypto()
        try:
            key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
        except (OSError, ValueError, TypeError) as err:
            raise CacheError(
                f"jitops: JITOPS_REMOTE_SIGNING_KEY: cannot read an ed25519 private key from {path}: {err}"
            ) from None
        if not isinstance(key, ed25519.Ed25519PrivateKey):
            raise CacheError(f"jitops: JITOPS_REMOTE_SIGNING_KEY: {path} holds a {type(key).__name__}, not an ed25519 key")
        self._key = key
        raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.public = public_text(raw)

    def sign(self, body: bytes) -> str:
        return base64.b64encode(self._key.sign(body)).decode()


def verified(body: bytes, signature: str, public: str, trusted: set[bytes]) -> bool:
    """Whether `signature` (base64) is a valid signature of body by `public`, a key in `trusted`."""
    ed25519, _ = _crypto()
    from cryptography.exceptions import InvalidSignature

    try:
        raw = parse_public(public)
        if raw not in trusted:
            return False
        ed25519.Ed25519PublicKey.from_public_bytes(raw).verify(base64.b64decode(signature, validate=True), body)
        return True
    except (CacheError, InvalidSignature, ValueError, TypeError):
        return False


def keygen(private_path: Path) -> str:
    """Write a new private key to private_path (mode 0600, never over an existing file); return its
    public key."""
    ed25519, serialization = _crypto()
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(pem)
    return public_text(key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))
