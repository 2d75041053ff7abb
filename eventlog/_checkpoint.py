"""Signed checkpoints: every stream head, chained, Ed25519, in a file outside the db.

A checkpoint file is JSON Lines, one checkpoint per line, oldest first; each line is::

    {"created_at": NS, "heads": [{"hash": H, "seq": N, "stream": S}, ...],
     "key": PUBLIC_KEY_HEX, "prev": PREVIOUS_ID, "sig": SIGNATURE_HEX, "version": 1}

The signature is Ed25519 over the *statement*: that object without ``sig``, encoded as
JSON with sorted keys and no whitespace (msgspec). A checkpoint's id is the sha256 hex
of its statement; ``prev`` is the previous line's id (64 zeros for the first line).
Keys are PEM files (PKCS#8 private key, SubjectPublicKeyInfo public key). A checkpoint
proves something only when its key is one the verifier chose to trust (a public key
file, or a trusted-keys file: one hex public key per line, ``#`` comments), never
because the file names its own key; see docs/log-format.md, "Threat model".
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Collection
from pathlib import Path

import msgspec
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ._errors import CheckpointError
from ._hashchain import GENESIS_HASH
from ._output import OutputError, os_error_message, write_file
from ._types import EventStore

CHECKPOINT_VERSION = 1


class CheckpointHead(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One stream's head as signed: its last seq and that event's hash."""

    stream: str
    seq: int
    hash: str


class Statement(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The signed content of a checkpoint."""

    version: int
    created_at: int
    prev: str
    key: str
    heads: tuple[CheckpointHead, ...]


class Checkpoint(Statement, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A statement plus its Ed25519 signature (one line of a checkpoint file)."""

    sig: str

    def statement(self) -> bytes:
        """The exact bytes that were signed."""
        fields = {f: getattr(self, f) for f in Statement.__struct_fields__}
        return _ENCODER.encode(Statement(**fields))

    @property
    def id(self) -> str:
        """sha256 hex of the statement; the next checkpoint's ``prev``."""
        return hashlib.sha256(self.statement()).hexdigest()


_ENCODER = msgspec.json.Encoder(order="sorted")
_DECODER = msgspec.json.Decoder(Checkpoint)


def generate_key(path: str | os.PathLike[str]) -> Path:
    """Write a new Ed25519 private key to ``path`` (mode 0600, never overwrites) and its
    public key to ``path + ".pub"``; returns the public key's path."""
    priv_path = Path(path)
    pub_path = priv_path.with_name(priv_path.name + ".pub")
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    pub = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    write_file(priv_path, pem, what="key file", option="--out", mode=0o600, exclusive=True)
    try:
        write_file(pub_path, pub, what="public key file", option="--out")
    except OutputError:
        priv_path.unlink(missing_ok=True)  # a key pair, or nothing
        raise
    return pub_path


def _read(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise CheckpointError(f"{what} {path}: cannot read: {e.strerror}") from e


def load_private_key(path: str | os.PathLike[str]) -> Ed25519PrivateKey:
    """The Ed25519 private key in PEM file ``path``."""
    p = Path(path)
    try:
        key = serialization.load_pem_private_key(_read(p, "key file"), password=None)
    except (ValueError, TypeError) as e:
        raise CheckpointError(
            f"key file {p}: not an unencrypted PEM private key; create one with "
            "`skillog log keygen --out FILE`"
        ) from e
    if not isinstance(key, Ed25519PrivateKey):
        raise CheckpointError(f"key file {p}: not an Ed25519 key")
    return key


def load_public_key(path: str | os.PathLike[str]) -> str:
    """The hex raw public key from a PEM public key file (or a private key file)."""
    p = Path(path)
    data = _read(p, "key file")
    if b"PRIVATE KEY" in data:
        return public_hex(load_private_key(p).public_key())
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as e:
        raise CheckpointError(f"key file {p}: not a PEM public key") from e
    if not isinstance(key, Ed25519PublicKey):
        raise CheckpointError(f"key file {p}: not an Ed25519 key")
    return public_hex(key)


def public_hex(key: Ed25519PublicKey) -> str:
    """The 32 raw public key bytes in hex, as written in checkpoints."""
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


_HEX_KEY = re.compile(r"[0-9a-f]{64}")


def load_trusted_keys(path: str | os.PathLike[str]) -> frozenset[str]:
    """The hex public keys a verifier trusts: from a PEM public (or private) key file,
    or a trusted-keys file (one 64-hex-digit Ed25519 public key per line, as written
    in checkpoints' ``key``; text after the key and lines starting with ``#`` are
    comments)."""
    p = Path(path)
    data = _read(p, "key file")
    if b"-----BEGIN" in data:
        return frozenset([load_public_key(p)])
    keys: set[str] = set()
    for n, raw in enumerate(data.decode(errors="replace").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key = line.split()[0].lower()
        if not _HEX_KEY.fullmatch(key):
            raise CheckpointError(
                f"trusted-keys file {p}:{n}: {key[:20]!r} is not a 64-hex-digit Ed25519 "
                "public key; write one key per line (see `skillog log keygen`)"
            )
        keys.add(key)
    if not keys:
        raise CheckpointError(f"trusted-keys file {p}: contains no key")
    return frozenset(keys)


def read_checkpoints(path: str | os.PathLike[str]) -> list[Checkpoint]:
    """Parse a checkpoint file; a malformed line raises naming its line number."""
    p = Path(path)
    out: list[Checkpoint] = []
    for n, line in enumerate(_read(p, "checkpoint file").splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(_DECODER.decode(line))
        except msgspec.MsgspecError as e:
            raise CheckpointError(f"checkpoint file {p}:{n}: not a checkpoint: {e}") from e
    if not out:
        raise CheckpointError(f"checkpoint file {p}: contains no checkpoint")
    return out


def check_chain(chain: list[Checkpoint], trusted: Collection[str]) -> str | None:
    """The first problem with a checkpoint chain itself, or None.

    Checks that each checkpoint is signed by a ``trusted`` key (hex) and that its
    signature verifies, the ``prev`` links, and that heads never move backwards or
    disappear from one checkpoint to the next.
    """
    prev_id = GENESIS_HASH
    prev_heads: dict[str, int] = {}
    for n, cp in enumerate(chain, 1):
        where = f"checkpoint {n}"
        if cp.version != CHECKPOINT_VERSION:
            return f"{where}: version {cp.version} is not {CHECKPOINT_VERSION}"
        if cp.key not in trusted:
            return (
                f"{where}: signed by key {cp.key}, which is not among the "
                f"{len(trusted)} trusted key(s); pass the signer's public key with --key "
                "(or --tofu to trust the file's own key, which proves nothing against "
                "whoever could write the file)"
            )
        try:
            Ed25519PublicKey.from_public_bytes(bytes.fromhex(cp.key)).verify(
                bytes.fromhex(cp.sig), cp.statement()
            )
        except (InvalidSignature, ValueError):
            return f"{where}: signature does not verify (the checkpoint was altered)"
        if cp.prev != prev_id:
            return f"{where}: prev {cp.prev[:16]}... does not match the previous checkpoint"
        heads = {h.stream: h.seq for h in cp.heads}
        for stream, seq in prev_heads.items():
            if heads.get(stream, -1) < seq:
                return f"{where}: stream {stream!r} went back from seq {seq}"
        prev_id, prev_heads = cp.id, heads
    return None


async def make_checkpoint(
    store: EventStore,
    key: Ed25519PrivateKey,
    *,
    previous: Checkpoint | None,
    clock: Callable[[], int],
) -> Checkpoint:
    """Sign the current head of every stream in ``store``, chained to ``previous``;
    an archived stream's head is its tombstone's (eventlog/_archive.py), so a later
    checkpoint still extends the earlier ones."""
    heads = [
        CheckpointHead(stream=s.stream, seq=s.length - 1, hash=s.head_hash)
        for s in await store.streams()
    ]
    read_tombstones = getattr(store, "tombstones", None)
    if read_tombstones is not None:
        live = {h.stream for h in heads}
        heads += [
            CheckpointHead(stream=t.stream, seq=t.length - 1, hash=t.head_hash)
            for t in await read_tombstones()
            if t.stream not in live
        ]
    heads.sort(key=lambda h: h.stream)
    statement = Statement(
        version=CHECKPOINT_VERSION,
        created_at=clock(),
        prev=previous.id if previous else GENESIS_HASH,
        key=public_hex(key.public_key()),
        heads=tuple(heads),
    )
    sig = key.sign(_ENCODER.encode(statement)).hex()
    return Checkpoint(**msgspec.structs.asdict(statement), sig=sig)


def append_checkpoint(path: str | os.PathLike[str], checkpoint: Checkpoint) -> None:
    """Append ``checkpoint`` as one line to the file (created if absent): the file is
    replaced, complete and fsynced, or left as it was."""
    p = Path(path)
    try:
        before = p.read_bytes()
    except FileNotFoundError:
        before = b""
    except OSError as e:
        raise CheckpointError(f"checkpoint file {p}: cannot read: {os_error_message(e)}") from e
    # Rewritten whole and renamed into place: a full disk or a crash leaves the chain
    # as it was, never a torn last line.
    line = _ENCODER.encode(checkpoint) + b"\n"
    write_file(p, before + line, what="checkpoint file", option="--out")
