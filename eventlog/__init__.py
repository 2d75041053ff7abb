"""A generic, hash-chained, durable event log. Knows nothing about skills."""

from ._errors import SkillogError as SkillogError

__all__ = ["SkillogError"]
