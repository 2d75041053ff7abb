"""Detached Ed25519 signatures over a skill's hash.

A skill directory ``…/<dir>`` is signed in the file ``…/<dir>.sig`` next to it (a
file inside the skill would change the hash it signs). The file is JSON Lines, one
signature per signer::

    {"hash": SKILL_HASH, "key": PUBLIC_KEY_HEX, "name": SKILL_NAME, "sig": SIG_HEX}

The signature is over the *statement* ``{"format": 1, "hash": …, "name": …}``
encoded as JSON with sorted keys and no whitespace. Keys are the checkpoint keys
(``skillog log keygen``); a signature counts only when its key is one the
configuration trusts (``skills.trusted_signers``), never because the file names it.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from pathlib import Path

import msgspec
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from eventlog import load_private_key, write_file
from eventlog._checkpoint import public_hex

from ._errors import SkillError

MAX_SIGNATURE_FILE_BYTES = 64 * 1024
_ENCODER = msgspec.json.Encoder(order="sorted")


class SignatureError(SkillError):
    """A skill could not be signed (no key, unwritable signature file)."""


class SkillSignature(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One line of a ``.sig`` file."""

    name: str
    hash: str
    key: str
    sig: str


class SignatureCheck(msgspec.Struct, frozen=True, kw_only=True):
    """What verifying a skill's signatures found: the trusted key whose signature over
    this exact hash verified (None if none did), and why, in words."""

    signed_by: str | None
    detail: str


def signature_path(root: str | os.PathLike[str]) -> Path:
    """Where the signatures of the skill directory ``root`` live."""
    path = Path(os.path.abspath(root))
    return path.with_name(path.name + ".sig")


def statement(name: str, hash_: str) -> bytes:
    """The bytes a signature signs."""
    return _ENCODER.encode({"format": 1, "hash": hash_, "name": name})


def sign_skill(root: str | os.PathLike[str], name: str, hash_: str, key_file: str) -> Path:
    """Sign ``hash_`` (the hash of the skill ``name`` at ``root``) with the private key
    in ``key_file``; the signature replaces any earlier one by the same key. Written
    atomically; returns the signature file's path."""
    key = load_private_key(key_file)
    entry = SkillSignature(
        name=name,
        hash=hash_,
        key=public_hex(key.public_key()),
        sig=key.sign(statement(name, hash_)).hex(),
    )
    path = signature_path(root)
    kept = [s for s in _read(path) if s.key != entry.key]
    text = b"".join(_ENCODER.encode(s) + b"\n" for s in [*kept, entry])
    write_file(path, text, what="signature file")
    return path


def check_signature(
    root: str | os.PathLike[str] | None, name: str, hash_: str, trusted: Collection[str]
) -> SignatureCheck:
    """Whether a trusted key signed ``hash_`` for ``name`` in the signature file of
    ``root``. Never raises: an unreadable or malformed file is "not signed"."""
    if root is None:
        return SignatureCheck(signed_by=None, detail="an inline skill has no signature file")
    path = signature_path(root)
    try:
        entries = _read(path)
    except SignatureError as e:
        return SignatureCheck(signed_by=None, detail=str(e))
    if not entries:
        return SignatureCheck(signed_by=None, detail=f"not signed (no {path.name})")
    problems: list[str] = []
    for s in entries:
        if s.key not in trusted:
            problems.append(f"signed by {s.key[:16]}…, a key not in skills.trusted_signers")
        elif (s.name, s.hash) != (name, hash_):
            problems.append(
                f"the signature by {s.key[:16]}… is for sha256:{s.hash[:12]}, not this "
                f"content (sha256:{hash_[:12]}); sign it again"
            )
        elif _valid(s, name, hash_):
            return SignatureCheck(signed_by=s.key, detail=f"signed by {s.key[:16]}…")
        else:
            problems.append(f"the signature by {s.key[:16]}… does not verify")
    return SignatureCheck(signed_by=None, detail="; ".join(problems))


def _valid(s: SkillSignature, name: str, hash_: str) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(bytes.fromhex(s.key)).verify(
            bytes.fromhex(s.sig), statement(name, hash_)
        )
    except (InvalidSignature, ValueError):
        return False
    return True


def _read(path: Path) -> list[SkillSignature]:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SIGNATURE_FILE_BYTES + 1)
    except FileNotFoundError:
        return []
    except OSError as e:
        raise SignatureError(f"cannot read the signature file {path}: {e.strerror}") from e
    if len(data) > MAX_SIGNATURE_FILE_BYTES:
        raise SignatureError(f"the signature file {path} is over {MAX_SIGNATURE_FILE_BYTES} bytes")
    out = []
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(msgspec.json.decode(line, type=SkillSignature))
        except msgspec.DecodeError as e:
            raise SignatureError(
                f"{path}:{n}: not a skill signature ({e}); `skillog skills sign` writes them"
            ) from None
    return out
