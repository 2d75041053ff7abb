"""What the model reads of a script's output: the tool result, capped after encoding.

A script's output is stored whole (up to the storage cap) in the blob store; the model
reads the tool result JSON, and *that* is what the policy's ``output_cap_bytes`` caps:
escaping can make one byte of output cost six bytes of JSON (``\\u0000``), so capping
raw bytes does not bound what the model receives. When the result would be larger,
stdout and stderr are cut to fit and each cut one ends with a marker saying how much
the model sees and that the rest is in the log. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

from ._model import encode_canonical

MARKER = (
    "\n[skillog: output cut for the model here: {shown} of {total} characters shown; "
    "the full output is recorded in the session log]"
)
"""Appended to a stream the model sees only part of."""


def _size(text: str) -> int:
    return len(encode_canonical(text))


def _longest_prefix(text: str, budget: int) -> int:
    """The longest prefix of ``text`` whose JSON string encoding fits ``budget`` bytes."""
    low, high = 0, min(len(text), budget)  # every character costs at least one byte
    while low < high:
        mid = (low + high + 1) // 2
        if _size(text[:mid]) <= budget:
            low = mid
        else:
            high = mid - 1
    return low


def model_view(fields: Mapping[str, object], stdout: str, stderr: str, cap: int) -> str:
    """The canonical JSON of ``fields`` plus ``stdout``/``stderr``, at most ``cap``
    UTF-8 bytes when it can be (the fields alone are never cut)."""
    full = encode_canonical({**fields, "stdout": stdout, "stderr": stderr})
    if len(full) <= cap:
        return full.decode()
    skeleton = len(encode_canonical({**fields, "stdout": "", "stderr": "", "output_cut": True}))
    room = max(cap - skeleton, 0)
    need = {"stdout": _size(stdout) - 2, "stderr": _size(stderr) - 2}
    # stderr usually says why something failed: it gets at least a third of the room,
    # and all that stdout does not need.
    shares = {"stderr": min(need["stderr"], max(room // 3, room - need["stdout"]))}
    shares["stdout"] = room - shares["stderr"]
    cut: dict[str, str] = {}
    for name, text in (("stdout", stdout), ("stderr", stderr)):
        if need[name] <= shares[name]:
            cut[name] = text
            continue
        cut[name] = cut_text(text, shares[name])
    return encode_canonical({**fields, **cut, "output_cut": True}).decode()


def cut_text(text: str, cap: int) -> str:
    """``text`` whole when its JSON string encoding fits ``cap`` bytes, else its longest
    prefix that fits with the marker saying how much is shown."""
    if _size(text) <= cap:
        return text
    marker = MARKER.format(shown=len(text), total=len(text))  # the longest it can be
    keep = _longest_prefix(text, max(cap - _size(marker), 0))
    return text[:keep] + MARKER.format(shown=keep, total=len(text))
