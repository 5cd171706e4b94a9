"""The job's sink flags, made from the fields of :class:`~cdc_sink.spark.options.SinkOptions`
(and of its nested option values, :class:`~cdc_sink.spark.options.DecodeOptions` and
:class:`~cdc_sink.table.TableOptions`), never declared again.

    field (path)                  flag                        value
    ----------------------------  --------------------------  ---------------------------
    format                        --format                    choices of its Literal
    decode.json_decoder           --json-decoder              choices of its Literal
    decode.options                --decoder-option KEY=VALUE  repeatable; JSON when it parses
    table.page_compression        --page-compression          zstd|lz4|none (none: None)
    table.compact_every           --tablet-compact-every      int
    storage_options               --storage-option KEY=VALUE  repeatable; no secret
    ...                           --<field-name>              from the field's type

Each flag's name is the field's (``_`` as ``-``), but for the few in :data:`FLAG_NAMES`
(today's names, kept, and one that another flag of the job holds); its type, choices and
default come from the field's annotation and default, its help from the attribute
docstring that follows the field (read with :mod:`ast`). :func:`add_sink_flags` adds
them to a parser, :func:`sink_options` builds the :class:`SinkOptions` of a parsed
namespace: a field added to the options is a flag of ``cdc-sink run`` with nothing else
to write (tests/job/test_sink_flags.py checks every field's round trip).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import itertools
import re
import textwrap
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from cdc_sink.job.args import key_value_pairs, parse_decoder_options, parse_storage_options
from cdc_sink.spark.options import SinkOptions

__all__ = [
    "FLAG_NAMES",
    "OptionFlag",
    "add_sink_flags",
    "option_flags",
    "sink_options",
]

FieldPath = tuple[str, ...]
"""A field of :class:`SinkOptions`: ``("format",)``, ``("decode", "where")``..."""

FLAG_NAMES: Mapping[FieldPath, str] = types.MappingProxyType(
    {
        ("decode", "options"): "--decoder-option",
        ("decode", "processes"): "--decode-processes",
        ("decode", "where"): "--decode-in",
        ("storage_options",): "--storage-option",
        ("table", "compact_every"): "--tablet-compact-every",  # --compact-every: the job's
    }
)
"""The flags not named after their field's own name."""

_NOTES: Mapping[FieldPath, str] = types.MappingProxyType(
    {
        ("app_id",): "the job derives it from the checkpoint instead",
        ("decode", "options"): "VALUE is parsed as JSON when it parses, else taken as a string",
        ("storage_options",): "a secret here is refused: credentials come from the environment",
    }
)
"""What the job adds to a field's help."""

_SHOW: Mapping[FieldPath, Callable[[Any], str]] = types.MappingProxyType(
    {("table", "file_mode"): oct}
)
"""How a default is shown in the help, where ``str`` would not say it well."""

Kind = Literal["choice", "bool", "int", "float", "str", "pairs"]


@dataclass(frozen=True)
class OptionFlag:
    """The flag of one leaf field of :class:`SinkOptions`.

    Attributes:
        path: The field (``("decode", "where")``).
        flag: The long flag (``--decode-in``).
        kind: How the value is read: ``choice``, ``bool``, ``int``, ``float``, ``str`` or
            ``pairs`` (repeatable ``KEY=VALUE``, a mapping).
        default: The field's default.
        choices: The values of a ``choice`` (with ``none`` for None, when the field takes
            None and its default is another value).
        help: The field's attribute docstring, up to its first sentence's end or ``;``.
    """

    path: FieldPath
    flag: str
    kind: Kind
    default: Any
    choices: tuple[str, ...] = ()
    help: str = ""

    @property
    def dest(self) -> str:
        """The namespace attribute (``decode_in``), also the ``--config`` key and, upper
        case after ``CDC_SINK_``, the environment variable."""
        return self.flag.removeprefix("--").replace("-", "_")

    def add_to(self, parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
        """Adds the flag to ``parser``."""
        shown = _SHOW.get(self.path, str)(self.default) if self.default is not None else None
        note = _NOTES.get(self.path)
        text = self.help + (f" ({note})" if note else "")
        if self.kind == "pairs":
            parser.add_argument(
                self.flag, action="append", default=[], metavar="KEY=VALUE", help=text
            )
            return
        text += f" (default {shown})" if shown is not None and self.kind != "bool" else ""
        if self.kind == "bool":
            action = "store_true" if not self.default else argparse.BooleanOptionalAction
            parser.add_argument(self.flag, action=action, default=self.default, help=text)
        elif self.kind == "choice":
            parser.add_argument(self.flag, choices=self.choices, default=self.default, help=text)
        elif self.kind == "str":
            parser.add_argument(self.flag, default=self.default, help=text)
        else:
            read = _int if self.kind == "int" else float
            parser.add_argument(self.flag, type=read, default=self.default, metavar="N", help=text)

    def value(self, parsed: Any) -> Any:
        """The field's value of the flag's parsed value.

        Raises:
            ValueError: A bad ``KEY=VALUE`` item (or a secret as a storage option).
        """
        if self.kind == "pairs":
            return _PAIRS.get(self.path, _string_pairs)(parsed or [])
        if self.kind == "choice" and parsed == "none" and "none" in self.choices:
            return None  # --page-compression none
        return parsed


def _int(text: str) -> int:
    """An int flag's value: ``416``, ``0o640``, ``0x1a0``."""
    return int(text, 0)


@functools.cache
def option_flags() -> tuple[OptionFlag, ...]:
    """The flag of every leaf field of :class:`SinkOptions`, in field order.

    Raises:
        TypeError: A field of a type no flag reads (add it to :func:`_flag`).
    """
    return tuple(_flags(SinkOptions, ()))


def _flags(cls: type[Any], prefix: FieldPath) -> list[OptionFlag]:
    hints = typing.get_type_hints(cls)
    docs = _attribute_docs(cls)
    out: list[OptionFlag] = []
    for f in dataclasses.fields(cls):
        path = (*prefix, f.name)
        nested = _nested(hints[f.name])
        if nested is not None:
            out += _flags(nested, path)
            continue
        default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        out.append(_flag(path, hints[f.name], default, docs.get(f.name, "")))
    return out


def _flag(path: FieldPath, hint: Any, default: Any, doc: str) -> OptionFlag:
    """The flag of the field ``path`` of type ``hint``."""
    name = FLAG_NAMES.get(path, "--" + path[-1].replace("_", "-"))
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    optional = _is_union(hint) and len(args) < len(typing.get_args(hint))
    inner = args[0] if optional and len(args) == 1 else hint
    literal = [a for a in typing.get_args(inner)] if typing.get_origin(inner) is Literal else []
    if literal:
        optional = optional or None in literal
        choices = tuple(str(v) for v in literal if v is not None)
        if optional and default is not None and "none" not in choices:
            choices += ("none",)
        return OptionFlag(path, name, "choice", default, choices, doc)
    origin = typing.get_origin(inner) or inner
    if inspect.isclass(origin) and issubclass(origin, Mapping):
        return OptionFlag(path, name, "pairs", default, help=doc)
    kinds: dict[Any, Kind] = {bool: "bool", int: "int", float: "float", str: "str"}
    if inner in kinds:
        return OptionFlag(path, name, kinds[inner], default, help=doc)
    raise TypeError(f"no flag reads SinkOptions field {'.'.join(path)} of type {hint}")


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


def _nested(hint: Any) -> type[Any] | None:
    """The option dataclass a field holds (``TableOptions | None`` too), else None."""
    for t in (hint, *typing.get_args(hint)):
        if dataclasses.is_dataclass(t) and isinstance(t, type):
            return t
    return None


def _attribute_docs(cls: type[Any]) -> dict[str, str]:
    """The first sentence of each field's attribute docstring (the string after it), as
    argparse help (markup dropped, ``%`` escaped)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body if isinstance(tree.body[0], ast.ClassDef) else []
    out: dict[str, str] = {}
    for node, after in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            out[node.target.id] = _help_text(after.value.value)
    return out


def _help_text(doc: str) -> str:
    text = " ".join(doc.split())
    text = re.sub(  # :class:`~a.B` -> B, :mod:`a.b` -> a.b
        r":\w+:`(~?)([^`]*)`", lambda m: m[2].rsplit(".", 1)[-1] if m[1] else m[2], text
    )
    text = text.replace("``", "")
    first = re.split(r"(?<=\.)\s+(?=[A-Z])|;\s+", text, maxsplit=1)[0]
    return first.rstrip(" .").replace("%", "%%")


def add_sink_flags(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    fields: Sequence[str] | None = None,
) -> None:
    """Adds the flag of every field of :class:`SinkOptions` (or of the fields named
    ``fields``, dotted: ``"format"``, ``"decode.options"``) to ``parser``.

    Raises:
        KeyError: A name of ``fields`` is no field.
    """
    flags = {".".join(f.path): f for f in option_flags()}
    for name in fields if fields is not None else flags:
        flags[name].add_to(parser)


def sink_options(args: argparse.Namespace) -> SinkOptions:
    """The :class:`SinkOptions` the flags of :func:`add_sink_flags` name in ``args`` (not
    checked yet: :func:`cdc_sink.spark.sink` checks it).

    Raises:
        ValueError: A bad ``KEY=VALUE`` item, a secret given as a storage option, or a
            value a field refuses (e.g. ``--file-mode``).
    """
    values = {f.path: f.value(getattr(args, f.dest)) for f in option_flags()}
    options: SinkOptions = _build(SinkOptions, (), values)
    return options


def _build(cls: type[Any], prefix: FieldPath, values: Mapping[FieldPath, Any]) -> Any:
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        path = (*prefix, f.name)
        nested = _nested(hints[f.name])
        kwargs[f.name] = values[path] if nested is None else _build(nested, path, values)
    return cls(**kwargs)


def _string_pairs(items: Sequence[str]) -> dict[str, str]:
    return dict(key_value_pairs(items, "KEY=VALUE"))


_PAIRS: Mapping[FieldPath, Callable[[Sequence[str]], dict[str, Any]]] = types.MappingProxyType(
    {("decode", "options"): parse_decoder_options, ("storage_options",): parse_storage_options}
)
"""How the ``KEY=VALUE`` items of a mapping field are read (default: str to str)."""
