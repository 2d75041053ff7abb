"""Rewrite keys of the ``skills:`` section of a YAML text, keeping every other byte.

``skillog skills enable/disable/install`` change one or two keys of a file the user
wrote by hand; re-dumping the whole file would drop their comments, order and quoting.
Instead the text is edited where the key's value sits, found through PyYAML's node
positions: a block list is edited item by item (kept items keep their lines and
comments), any other value is replaced in place, a new key is added after the last
line of the section. Pure functions over text.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping

import yaml

_Loader = yaml.CSafeLoader if hasattr(yaml, "CSafeLoader") else yaml.SafeLoader


def set_skills_keys(text: str, changes: Mapping[str, object]) -> str:
    """``text`` with each ``skills.<key>`` set to its value (plain data: str, bool, int,
    None, lists, dicts), the rest of the text unchanged."""
    for key, value in changes.items():
        text = _set(text if not text or text.endswith("\n") else text + "\n", key, value)
    return text


def _set(text: str, key: str, value: object) -> str:
    root = yaml.compose(text, Loader=_Loader)
    if not isinstance(root, yaml.MappingNode):  # empty, or only comments
        return text + _entry("skills", {key: value}, 0)
    skills = _find(root, "skills")
    if skills is None:  # "{}": the format has no other top-level key
        return _replace(text, root, {"skills": {key: value}})
    skills_key, section = skills
    if isinstance(section, yaml.ScalarNode):  # "skills:" with no value, or null
        head = text[: section.start_mark.index].rstrip(" \t")
        entry = _entry(key, value, skills_key.start_mark.column + 2).rstrip("\n")
        return head + "\n" + entry + text[section.end_mark.index :]
    if not isinstance(section, yaml.MappingNode) or section.flow_style:
        old = yaml.load(text[section.start_mark.index : _end(section)], Loader=_Loader)
        return _replace(text, section, {**(old or {}), key: value})
    pair = _find(section, key)
    if pair is None:
        at = _line_end(text, _end(section)) + 1
        return text[:at] + _entry(key, value, section.value[0][0].start_mark.column) + text[at:]
    key_node, node = pair
    if isinstance(node, yaml.ScalarNode):
        if node.start_mark.index == node.end_mark.index:  # "key:" with no value
            return (
                text[: node.start_mark.index] + " " + _inline(value) + text[node.end_mark.index :]
            )
        return _replace(text, node, value)
    assert isinstance(node, yaml.CollectionNode)
    if node.flow_style:
        return _replace(text, node, value)
    if isinstance(node, yaml.SequenceNode) and isinstance(value, list) and value:
        return _edit_items(text, node, yaml.load(text, Loader=_Loader)["skills"][key], value)
    # A block collection becomes an inline value right after the key's colon.
    return text[: key_node.end_mark.index] + ": " + _inline(value) + text[_end(node) :]


def _edit_items(text: str, seq: yaml.SequenceNode, old: list[object], new: list[object]) -> str:
    """Keep the lines of the items that stay, drop the others, add the new ones where
    they go (difflib's opcodes over the items' values). Comments and blank lines
    between items stay."""
    items = seq.value
    spans = [(_line_start(text, _item_start(text, n)), _line_end(text, _end(n)) + 1) for n in items]
    gaps = [text[spans[i][1] : spans[i + 1][0]] for i in range(len(items) - 1)] + [""]
    indent = _item_start(text, items[0]) - spans[0][0]
    out = [text[: spans[0][0]]]
    diff = difflib.SequenceMatcher(
        None, [_key(v) for v in old], [_key(v) for v in new], autojunk=False
    )
    for op, i1, i2, j1, j2 in diff.get_opcodes():
        out += [_item(v, indent) for v in new[j1:j2]] if op in ("insert", "replace") else []
        for i in range(i1, i2):
            out += [text[spans[i][0] : spans[i][1]], gaps[i]] if op == "equal" else [gaps[i]]
    out.append(text[spans[-1][1] :])
    return "".join(out)


def _find(mapping: yaml.MappingNode, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    return next(
        ((k, v) for k, v in mapping.value if isinstance(k, yaml.ScalarNode) and k.value == key),
        None,
    )


def _entry(key: str, value: object, indent: int) -> str:
    """``key: value`` as lines at ``indent``: a non-empty list or mapping in block style."""
    pad = " " * indent
    if isinstance(value, list) and value:
        return f"{pad}{key}:\n" + "".join(_item(v, indent + 2) for v in value)
    if isinstance(value, dict) and value:
        return f"{pad}{key}:\n" + "".join(_entry(k, v, indent + 2) for k, v in value.items())
    return f"{pad}{key}: {_inline(value)}\n"


def _item(value: object, indent: int) -> str:
    """One block-list item at ``indent`` (the column of its ``-``)."""
    lines = _dump([value], flow=False).splitlines()
    return "".join(" " * indent + line + "\n" for line in lines)


def _inline(value: object) -> str:
    return _dump([value], flow=True).strip()[1:-1]  # a one-item flow list, unwrapped


def _dump(value: object, *, flow: bool) -> str:
    return yaml.safe_dump(
        value, default_flow_style=flow, sort_keys=False, allow_unicode=True, width=1 << 30
    )


def _replace(text: str, node: yaml.Node, value: object) -> str:
    return text[: node.start_mark.index] + _inline(value) + text[_end(node) :]


def _key(value: object) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def _end(node: yaml.Node) -> int:
    """Index just past the node's last character (block collections and block scalars
    end at the next token, possibly lines further down: use their last content)."""
    if isinstance(node, yaml.MappingNode) and not node.flow_style:
        return _end(node.value[-1][1])
    if isinstance(node, yaml.SequenceNode) and not node.flow_style:
        return _end(node.value[-1])
    mark = node.end_mark
    return mark.index - 1 if mark.column == 0 and mark.index > 0 else mark.index


def _item_start(text: str, node: yaml.Node) -> int:
    """Index of the ``-`` that opens the block-list item ``node``."""
    i = node.start_mark.index - 1
    while i > 0 and text[i] in " \t\r\n":
        i -= 1
    return i


def _line_start(text: str, index: int) -> int:
    return text.rfind("\n", 0, index) + 1


def _line_end(text: str, index: int) -> int:
    """Index of the newline ending the line ``index`` is on (the text ends with one)."""
    end = text.find("\n", index)
    return len(text) - 1 if end < 0 else end
