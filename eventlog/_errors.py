"""The one error base of the project.

It lives in the lowest layer so that every package can subclass it without importing
upward. Messages say what happened, where, and what to do about it.
"""

from __future__ import annotations


class SkillogError(Exception):
    """Base of every error skillog raises on purpose.

    ``exit_code`` is what the CLI exits with when this error reaches it: 2 means the
    input (a database, a file, an argument) could not be used.
    """

    exit_code: int = 2
