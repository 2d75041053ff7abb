"""A generic, hash-chained, durable event log. Knows nothing about skills.

See docs/architecture.md (the contract) and docs/log-format.md (the public format).
"""

from ._archive import ArchiveError as ArchiveError
from ._archive import ArchiveResult as ArchiveResult
from ._archive import archive as archive_streams
from ._archive import load_archive as load_archive
from ._checkpoint import Checkpoint as Checkpoint
from ._checkpoint import CheckpointHead as CheckpointHead
from ._checkpoint import append_checkpoint as append_checkpoint
from ._checkpoint import generate_key as generate_key
from ._checkpoint import load_private_key as load_private_key
from ._checkpoint import load_public_key as load_public_key
from ._checkpoint import load_trusted_keys as load_trusted_keys
from ._checkpoint import make_checkpoint as make_checkpoint
from ._checkpoint import read_checkpoints as read_checkpoints
from ._codec import Codec as Codec
from ._codec import split_type as split_type
from ._errors import BlobNotFoundError as BlobNotFoundError
from ._errors import CheckpointError as CheckpointError
from ._errors import CodecError as CodecError
from ._errors import ConcurrencyError as ConcurrencyError
from ._errors import DatabaseFormatError as DatabaseFormatError
from ._errors import DatabaseFullError as DatabaseFullError
from ._errors import DatabaseLockedError as DatabaseLockedError
from ._errors import EventLogError as EventLogError
from ._errors import ImportFormatError as ImportFormatError
from ._errors import InvalidEventError as InvalidEventError
from ._errors import ReadOnlyDatabaseError as ReadOnlyDatabaseError
from ._errors import SkillogError as SkillogError
from ._errors import SnapshotMismatchError as SnapshotMismatchError
from ._errors import StoreError as StoreError
from ._errors import UnknownEventTypeError as UnknownEventTypeError
from ._fold import Folded as Folded
from ._fold import SnapshotPolicy as SnapshotPolicy
from ._fold import fold as fold
from ._fold import fold_stream as fold_stream
from ._hashchain import GENESIS_HASH as GENESIS_HASH
from ._hashchain import blob_digest as blob_digest
from ._hashchain import event_hash as event_hash
from ._hashchain import link_preimage as link_preimage
from ._jsonl import ImportReport as ImportReport
from ._jsonl import export_jsonl as export_jsonl
from ._jsonl import import_jsonl as import_jsonl
from ._memory import MemoryStore as MemoryStore
from ._open import DB_HELP as DB_HELP
from ._open import default_db as default_db
from ._open import describe_db as describe_db
from ._open import is_postgres_url as is_postgres_url
from ._open import open_postgres_store as open_postgres_store
from ._open import open_store as open_store
from ._open import sqlite_path as sqlite_path
from ._output import OutputError as OutputError
from ._output import os_error_message as os_error_message
from ._output import output_file as output_file
from ._output import write_file as write_file
from ._snapshot import Snapshot as Snapshot
from ._snapshot import SnapshotStore as SnapshotStore
from ._sqlite import SqliteStore as SqliteStore
from ._sqlite import open_sqlite_store as open_sqlite_store
from ._sqlite_db import create_private as create_private
from ._terminal import inert_json as inert_json
from ._terminal import visible as visible
from ._tombstone import MAINTENANCE_STREAM as MAINTENANCE_STREAM
from ._tombstone import Tombstone as Tombstone
from ._tombstone import is_archived_event as is_archived_event
from ._tombstone import listed_tombstones as listed_tombstones
from ._types import Event as Event
from ._types import EventStore as EventStore
from ._types import Head as Head
from ._types import NewEvent as NewEvent
from ._types import StreamInfo as StreamInfo
from ._types import closing as closing
from ._verify import BlobReader as BlobReader
from ._verify import Fault as Fault
from ._verify import Grammar as Grammar
from ._verify import References as References
from ._verify import StreamGrammar as StreamGrammar
from ._verify import VerifyReport as VerifyReport
from ._verify import verify as verify
from ._verify import verify_stream as verify_stream

__all__ = [
    "DB_HELP",
    "GENESIS_HASH",
    "MAINTENANCE_STREAM",
    "ArchiveError",
    "ArchiveResult",
    "BlobNotFoundError",
    "BlobReader",
    "Checkpoint",
    "CheckpointError",
    "CheckpointHead",
    "Codec",
    "CodecError",
    "ConcurrencyError",
    "DatabaseFormatError",
    "DatabaseFullError",
    "DatabaseLockedError",
    "Event",
    "EventLogError",
    "EventStore",
    "Fault",
    "Folded",
    "Grammar",
    "Head",
    "ImportFormatError",
    "ImportReport",
    "InvalidEventError",
    "MemoryStore",
    "NewEvent",
    "OutputError",
    "ReadOnlyDatabaseError",
    "References",
    "SkillogError",
    "Snapshot",
    "SnapshotMismatchError",
    "SnapshotPolicy",
    "SnapshotStore",
    "SqliteStore",
    "StoreError",
    "StreamGrammar",
    "StreamInfo",
    "Tombstone",
    "UnknownEventTypeError",
    "VerifyReport",
    "append_checkpoint",
    "archive_streams",
    "blob_digest",
    "closing",
    "create_private",
    "default_db",
    "describe_db",
    "event_hash",
    "export_jsonl",
    "fold",
    "fold_stream",
    "generate_key",
    "import_jsonl",
    "inert_json",
    "is_archived_event",
    "is_postgres_url",
    "link_preimage",
    "listed_tombstones",
    "load_archive",
    "load_private_key",
    "load_public_key",
    "load_trusted_keys",
    "make_checkpoint",
    "open_postgres_store",
    "open_sqlite_store",
    "open_store",
    "os_error_message",
    "output_file",
    "read_checkpoints",
    "split_type",
    "sqlite_path",
    "verify",
    "verify_stream",
    "visible",
    "write_file",
]
