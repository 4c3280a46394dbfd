# SPDX-License-Identifier: MIT
"""Ed25519 signatures of the remote cache's records (the `remote` extra's `cryptography`). A signed
body names its lookup key and every blob's sha256, so a signature cannot be replayed elsewhere."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

from .._errors import CacheError, warn

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


def parse_public(text: str, setting: str = "JITOPS_REMOTE_TRUSTED_KEYS", source: str = "") -> bytes:
    """The 32 bytes of an `ed25519:<base64>` public key; CacheError naming the setting otherwise
    (and the file it came from, never what a file holds: it may be a private key)."""
    text = text.strip()
    try:
        raw = base64.b64decode(text.removeprefix(PUBLIC_PREFIX), validate=True)
    except ValueError:
        raw = b""
    if not text.startswith(PUBLIC_PREFIX) or len(raw) != 32:
        if "PRIVATE KEY" in text:
            what = f"{source or 'it'} holds a private key: readers take the public key (in KEYFILE.pub, from `jitops-cache remote keygen`)"
        else:
            what = f"{source or repr(text[:24])} is not a public key (`ed25519:` and 32 bytes in base64)"
        raise CacheError(f"jitops: {setting}: {what}")
    return raw


def trusted_keys(value: str) -> set[bytes]:
    """The keys JITOPS_REMOTE_TRUSTED_KEYS names: public keys, or files holding one, separated by
    commas or white space. A file that others could change is refused, as a cache root is: whoever
    writes it chooses whose code every reader runs."""
    keys = set()
    for item in value.replace(",", " ").split():
        keys.add(parse_public(item) if item.startswith(PUBLIC_PREFIX) else parse_public(_key_file(item), source=item))
    return keys


def _key_file(path: str) -> str:
    """What a trusted-key file holds: a regular file that only its owner (you, or root) can write."""
    try:
        with open(path, "rb") as file:
            info = os.fstat(file.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise OSError(0, "not a regular file")
            text = file.read(1 << 16).decode(errors="replace")
    except OSError as err:
        raise CacheError(
            f"jitops: JITOPS_REMOTE_TRUSTED_KEYS: {path!r} is neither a public key nor a readable file ({err.strerror})"
        ) from None
    problems = [f"owned by uid {info.st_uid}, not by you"] if info.st_uid not in (os.getuid(), 0) else []
    problems += [f"writable by others (mode {stat.S_IMODE(info.st_mode):o})"] if info.st_mode & 0o022 else []
    if problems:
        raise CacheError(
            f"jitops: JITOPS_REMOTE_TRUSTED_KEYS: {path} is {' and '.join(problems)}: whoever can write it "
            f"chooses whose libraries this process loads; make it yours and run chmod go-w {path}"
        )
    return text


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
        if (mode := stat.S_IMODE(os.stat(path).st_mode)) & 0o077:
            warn(
                f"JITOPS_REMOTE_SIGNING_KEY: {path} can be read by others (mode {mode:o}): anyone who reads it can sign "
                f"libraries your readers load; run chmod 600 {path}"
            )
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
    """Write a new private key to private_path (mode 0600, never over an existing file) and its
    public key to private_path.pub; return the public key."""
    ed25519, serialization = _crypto()
    key = ed25519.Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    public = public_text(key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(pem)
    Path(f"{private_path}.pub").write_text(public + "\n")  # what readers trust (JITOPS_REMOTE_TRUSTED_KEYS)
    return public
