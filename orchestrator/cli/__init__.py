"""The ``skillog`` command: one module per command, ``main`` the entry point.

An edge over the library: each command module is a thin layer that parses arguments,
calls the library and prints (docs/cli.md). Nothing in the core imports this package.
"""

from ._main import main as main

__all__ = ["main"]
