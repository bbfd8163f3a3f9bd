"""JSON text to a tree of values that know their path in the model, for errors that name it."""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import rapidjson

from ..errors import DmlError
from ..types import DataType

T = TypeVar("T")

_FLOAT_WORDS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


@dataclass(frozen=True)
class Node:
    """A JSON value and its path in the model (``resources.A.initialValues[2]``)."""

    value: object
    path: str

    def error(self, rule: str) -> DmlError:
        return DmlError(f"{self.path or 'top level'}: {rule}")

    def at(self, key: str | int, value: object) -> Node:
        """The node of ``value``, this node's member ``key`` (an array's element when an int)."""
        if isinstance(key, int):
            return Node(value, f"{self.path}[{key}]")
        return Node(value, f"{self.path}.{key}" if self.path else key)

    def entries(self) -> dict[str, Node]:
        """An object's members by name."""
        if not isinstance(self.value, dict):
            raise self.error(f"expected an object, not {kind_of(self.value)}")
        return {key: self.at(key, member) for key, member in self.value.items()}

    def fields(self, known: Sequence[str], required: Sequence[str] = ()) -> dict[str, Node]:
        """An object's members; an unknown or a missing required name is an error."""
        members = self.entries()
        for key, member in members.items():
            if key not in known:
                raise member.error(f"unknown field (expected {one_of(known)})")
        for key in required:
            if key not in members:
                raise self.error(f"missing field '{key}'")
        return members

    def elements(self) -> list[Node]:
        if not isinstance(self.value, list):
            raise self.error(f"expected an array, not {kind_of(self.value)}")
        return [self.at(index, item) for index, item in enumerate(self.value)]

    def string(self) -> str:
        if not isinstance(self.value, str):
            raise self.error(f"expected a string, not {kind_of(self.value)}")
        return self.value

    def boolean(self) -> bool:
        if not isinstance(self.value, bool):
            raise self.error(f"expected true or false, not {kind_of(self.value)}")
        return self.value

    def integer(self, low: int, high: int) -> int:
        value = self.value
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.error(f"expected an integer from {low} to {high}, not {show(value)}")
        return value

    def unsigned(self, bits: int = 32) -> int:
        return self.integer(0, 2**bits - 1)

    def number(self) -> float:
        """A JSON number, or one of the strings "nan", "inf", "-inf" (any case)."""
        value = self.value
        if isinstance(value, str) and value.lower() in _FLOAT_WORDS:
            return _FLOAT_WORDS[value.lower()]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(f'expected a number or "nan", "inf", "-inf", not {show(value)}')
        try:
            return float(value)
        except OverflowError:
            raise self.error(f"{show(value)} is too large for a floating-point number") from None


def kind_of(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    kinds = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number"}
    return kinds.get(type(value), "null")


def show(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def one_of(names: Sequence[str] | Mapping[str, object]) -> str:
    return ", ".join(names)


def parse_data_type(node: Node) -> DataType:
    name = node.string()
    try:
        return DataType.parse(name)
    except DmlError as error:
        raise node.error(str(error)) from None


def parse_flags(node: Node, prefix: str, names: Mapping[str, int]) -> int:
    """A flags field: one name or an array of names (OR-ed), each with or without ``prefix``."""
    flags = 0
    for item in node.elements() if isinstance(node.value, list) else [node]:
        name = item.string().removeprefix(prefix)
        if name not in names:
            raise item.error(f"unknown flag (expected {one_of(names)})")
        flags |= names[name]
    return flags


def named(node: Node, table: Mapping[str, T], what: str) -> T:
    name = node.string()
    if name not in table:
        raise node.error(f"no {what} named '{name}' (the model has {one_of(table) or 'none'})")
    return table[name]


def file_name(node: Node) -> Path:
    """A path the file system can encode (JSON lets a string hold lone surrogates such as "\\ud800")."""
    text = node.string()
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        raise node.error(f"{show(text)} cannot name a file here ({sys.getfilesystemencoding()})") from None
    return Path(text)


def read_document(text: str, source: str) -> Node:
    """The model's JSON text as a tree; ``source`` names it in errors.

    DxDispatch reads models with RapidJSON, allowing comments and trailing commas (and nothing else
    beyond JSON: no unquoted keys, single quotes, NaN or hexadecimal numbers); so does this.

    >>> read_document('{"a": [1, 2,], /* note */}', "m.json").value
    {'a': [1, 2]}
    >>> read_document('{"a": NaN}', "m.json")
    Traceback (most recent call last):
    dmlq.errors.DmlError: malformed JSON: m.json:1:7: NaN and infinity are not JSON numbers
    """
    try:
        document = _DECODER(text)
    except (ValueError, RecursionError) as error:
        raise _malformed(str(error), text, source) from None
    literal = _non_finite_literal(text)
    if literal is not None:
        raise _located(literal, "NaN and infinity are not JSON numbers", text, source)
    return Node(document, "")


class _Members(dict[str, object]):
    """A JSON object's members: a repeated name is an error (DxDispatch would silently read the first)."""

    def __setitem__(self, key: str, value: object) -> None:
        if key in self:
            raise ValueError(f'duplicate member "{key}" in an object')
        super().__setitem__(key, value)


class _Decoder(rapidjson.Decoder):
    def start_object(self) -> _Members:
        return _Members()


# The number mode that refuses NaN literals (NM_NONE) drops parse_mode in python-rapidjson 1.25: this
# one reads them (as RapidJSON's kParseNanAndInfFlag, which DxDispatch does not set) to refuse them after.
_DECODER = _Decoder(
    parse_mode=rapidjson.PM_COMMENTS | rapidjson.PM_TRAILING_COMMAS, number_mode=rapidjson.NM_NAN
)
_TOKENS_THAT_HIDE_LITERALS = r'"(?:[^"\\]|\\.)*"|//[^\n]*|/\*.*?\*/'
_NON_FINITE = re.compile(rf"{_TOKENS_THAT_HIDE_LITERALS}|(-?(?:NaN|Inf))", re.DOTALL)


def _non_finite_literal(text: str) -> int | None:
    """The byte offset of the first NaN, Inf or Infinity literal outside strings and comments."""
    if "NaN" not in text and "Inf" not in text:
        return None  # the common case, without a scan
    for match in _NON_FINITE.finditer(text):
        if match[1]:
            return len(text[: match.start(1)].encode("utf-8", "surrogatepass"))
    return None


_PARSE_ERROR = re.compile(r"Parse error at offset (\d+): (.*?)[.!]?$")


def _malformed(problem: str, text: str, source: str) -> DmlError:
    """RapidJSON's error, placed where it gives a byte offset; other problems have no place."""
    match = _PARSE_ERROR.fullmatch(problem)
    if match is None:
        return DmlError(f"malformed JSON: {source}: {problem}")
    return _located(int(match[1]), match[2], text, source)


def _located(offset: int, problem: str, text: str, source: str) -> DmlError:
    """An error at a byte offset, shown at the line and column an editor shows."""
    before = text.encode("utf-8", "surrogatepass")[:offset].decode("utf-8", "replace")
    line, column = before.count("\n") + 1, len(before) - before.rfind("\n")
    return DmlError(f"malformed JSON: {source}:{line}:{column}: {problem}")
