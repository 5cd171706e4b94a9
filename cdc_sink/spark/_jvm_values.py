"""Each column's values judged as the Python decoders judge them, in Spark SQL (private).

The JVM decoder (:mod:`cdc_sink.spark.decode`) reads native JSON with ``from_json``,
``key`` and ``set`` as ``map<string,string>``; a map value is Jackson's text of the
member. That text is exact for a string (its content) and an integer (its digits), not
for a number with a point or an exponent, which Jackson reads as a double first. So
where the text decides (a decimal whose value is not an integer, a float that arrived
non-finite, a date or timestamp that arrived as an integer, which its token tells from a
string) the member's own token is read from the message (:mod:`._json_tokens`). Then:

- decimals: text without exponent that fits the column as written is cast as it is;
  other text has its digits counted as :mod:`cdc_sink.formats._decimaltext` counts them
  (the significant digits ``D``, the exponent ``E`` of the last; exponents of any
  length), and fits ``decimal(p, s)`` when it is zero or when ``E >= -s`` and ``len(D) +
  E <= p - s``; only values shown to fit are cast (a cast that neither rounds nor
  overflows). JSON strings holding decimals follow the same rule;
- floats: the text cast to double (float32: then to float, as the Python decoders
  round); a finite text beyond the type is out of range, not an infinity;
- integers: the map value cast (a number with a point or an exponent does not cast);
- dates and timestamps: an integer is days or microseconds since the epoch, a string ISO
  text cast by Spark; either within 0001-01-01..9999-12-31.

A value whose text decides but whose member is not found is refused, never guessed.

**Staged.** Each part of a judgement is a column of its own projection (``select("*",
...)``), referred to by the next: Spark fuses a chain of projections into one generated
method, and an expression referred to twice in one projection, or in a branch, is
computed (and generated) again. So every part is computed once per event, and the
generated code grows with the columns, not with how often a part is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from operator import or_
from typing import TYPE_CHECKING

import pyarrow as pa

from cdc_sink.formats.value_ranges import MAX_DAY, MAX_MICROS, MIN_DAY, MIN_MICROS
from cdc_sink.schema import Column, TableSchema
from cdc_sink.spark._json_tokens import member_token, object_text

if TYPE_CHECKING:
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import DataFrame

__all__ = [
    "Judgement",
    "Member",
    "judge",
    "schema_members",
    "with_steps",
    "with_tokens",
    "with_values",
]

_INTEGER = r"^-?[0-9]+\z"
_NON_FINITE = ('"Infinity"', '"-Infinity"', '"NaN"')
"""Jackson's text of a non-finite double (a literal, or a finite number beyond float64)."""
_DECIMAL_TEXT = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\z"
_DECIMAL_PARTS = r"^[+-]?([0-9]*)\.?([0-9]*)(?:[eE]([+-]?)0*([0-9]*))?\z"
_FINITE_TEXT = r"^\s*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\s*$"
_EXP_DIGITS = 18
"""Exponents with more significant digits are saturated (any such exponent puts a
non-zero value out of every decimal type)."""


def _sql_type(t: pa.DataType) -> str:
    """The Spark SQL type name of a supported Arrow type."""
    from cdc_sink.spark.types import spark_type

    return str(spark_type(t).simpleString())


@dataclass(frozen=True)
class Member:
    """A column as a member of the events' ``key`` or ``set`` object. What is judged of it
    is staged, each part once per event, in columns named ``tag`` + a letter: ``a`` its
    value's text in the map (Jackson's; null: JSON ``null``, or absent) and ``j`` whether
    the event sets it (:func:`with_values`), ``n`` whether it needs its token and ``t``
    the token (:func:`with_tokens`), the steps of :func:`with_steps`, and ``v`` its typed
    value (:func:`judge`, staged by the decoder)."""

    column: Column
    where: str  # "key" or "set"
    tag: str

    def part(self, letter: str) -> SparkColumn:
        from pyspark.sql import functions as F

        return F.col(self.tag + letter)

    @property
    def val(self) -> SparkColumn:
        return self.part("a")

    @property
    def judged(self) -> SparkColumn:
        from pyspark.sql import functions as F

        return self.part("j") if self.where == "set" else F.lit(True)

    @property
    def need(self) -> SparkColumn | None:
        """The events whose value only the member's own token tells exactly (None: no
        event of this column's type)."""
        t, v = self.column.type, self.val
        if pa.types.is_decimal(t):
            cond = ~v.rlike(_INTEGER)
        elif pa.types.is_floating(t):
            cond = v.isin(*_NON_FINITE)
        elif pa.types.is_date32(t) or pa.types.is_timestamp(t):
            cond = v.rlike(_INTEGER)
        else:
            return None
        return self.judged & v.isNotNull() & cond

    def token(self) -> SparkColumn:
        """The member's token where :attr:`need` (else null; '' where not found)."""
        from pyspark.sql import functions as F

        return F.lit(None).cast("string") if self.need is None else self.part("t")

    def text(self) -> tuple[SparkColumn, SparkColumn, SparkColumn]:
        """The text to judge (the token of a number where needed, else :attr:`val`),
        whether the token is a number, and whether it was needed but not found."""
        from pyspark.sql import functions as F

        tok = self.token()
        found = F.coalesce(tok != F.lit(""), F.lit(False))
        number = found & ~tok.startswith('"')
        missing = F.coalesce(tok == F.lit(""), F.lit(False))
        return F.when(number, tok).otherwise(self.val), number, missing


def schema_members(schema: TableSchema) -> list[Member]:
    """The key columns as members of ``key``, the value columns as members of ``set``."""
    keys = [Member(k, "key", f"__m{i}") for i, k in enumerate(schema.key_columns)]
    n = len(keys)
    return keys + [Member(c, "set", f"__m{n + i}") for i, c in enumerate(schema.value_columns)]


def with_values(df: DataFrame, members: list[Member]) -> DataFrame:
    """``df`` (with the parsed event ``e``) with each member's value text and, for the
    members of ``set``, whether the event sets it (deletes set nothing)."""
    from pyspark.sql import functions as F

    e = F.col("e")
    empty = F.create_map().cast("map<string,string>")
    maps = {"key": F.coalesce(e["key"], empty), "set": F.coalesce(e["set"], empty)}
    not_delete = ~F.coalesce(e["op"] == F.lit("delete"), F.lit(False))
    cols = [maps[m.where][m.column.name].alias(m.tag + "a") for m in members]
    cols += [
        (F.map_contains_key(maps["set"], F.lit(m.column.name)) & not_delete).alias(m.tag + "j")
        for m in members
        if m.where == "set"
    ]
    return df.select("*", *cols)


def with_tokens(df: DataFrame, members: list[Member]) -> DataFrame:
    """``df`` with the tokens the members need: first each ``key``/``set`` object's text
    (for the events where one of its members needs its token), then each such token."""
    from pyspark.sql import functions as F

    needy = [(m, need) for m in members if (need := m.need) is not None]
    if not needy:
        return df
    df = df.select("*", *[need.alias(m.tag + "n") for m, need in needy])
    objects = []
    for where in ("key", "set"):
        needs = [m.part("n") for m, _ in needy if m.where == where]
        if needs:
            obj = object_text(F.col("__v"), where)
            objects.append(F.when(reduce(or_, needs), obj).alias(f"__obj_{where}"))
    tokens = [
        F.when(m.part("n"), member_token(F.col(f"__obj_{m.where}"), m.column.name)).alias(
            m.tag + "t"
        )
        for m, _ in needy
    ]
    return df.select("*", *objects).select("*", *tokens)


# ---------------------------------------------------------------------- judgements
@dataclass(frozen=True)
class Judgement:
    """One column's values, judged.

    Attributes:
        typed: The values (null where refused, and only there or where JSON ``null``).
        out_of_range: Where a refused value is one of the type the column cannot hold.
        unread: Where a refused value's member was not found
            (:data:`cdc_sink.spark.decode.NOT_READ`).
    """

    typed: SparkColumn
    out_of_range: SparkColumn
    unread: SparkColumn


def judge(m: Member) -> Judgement:
    """The values of member ``m`` by the rule of its column's type."""
    from pyspark.sql import functions as F

    t = m.column.type
    if pa.types.is_decimal(t):
        return _decimals(m)
    if pa.types.is_floating(t):
        return _floats(m)
    if pa.types.is_date32(t) or pa.types.is_timestamp(t):
        return _temporals(m)
    if pa.types.is_integer(t):
        typed = m.val.try_cast(_sql_type(t))
        oor = m.val.rlike(_INTEGER)  # Jackson keeps an integer's digits
    elif pa.types.is_binary(t):
        typed, oor = F.try_to_binary(m.val, F.lit("base64")), F.lit(False)
    elif pa.types.is_string(t):
        typed, oor = m.val, F.lit(False)
    else:
        typed, oor = m.val.try_cast(_sql_type(t)), F.lit(False)
    return Judgement(typed, oor, F.lit(False))


def _plain_fit(t: pa.DataType) -> str:
    """A regular expression of the decimal text without exponent that fits ``t`` as
    written (no more than ``p - s`` digits before the point past leading zeros, nothing
    but zeros beyond ``s`` after it): Spark's cast of it loses nothing."""
    whole, scale = t.precision - t.scale, t.scale
    return f"^[+-]?(?=\\.?[0-9])0*+[0-9]{{0,{whole}}}(?:\\.[0-9]{{0,{scale}}}0*)?\\z"


def with_steps(df: DataFrame, members: list[Member]) -> DataFrame:
    """``df`` with the steps of judging each decimal, date and timestamp member, a step
    per projection (each refers to the one before, so that every part is computed once
    per value). Dates and timestamps: ``s``, the days or microseconds since the epoch of
    an integer or of ISO text. Decimals: the text ``x`` (a number's token where needed,
    else Jackson's); whether it fits as written ``q`` (:func:`_plain_fit`, the common
    case); for other text, whether it is decimal text ``g``, then its significant digits
    ``k`` (leading and trailing zeros dropped) and the exponent ``e`` of the last
    (exponent digits saturated beyond :data:`_EXP_DIGITS`)."""
    from pyspark.sql import functions as F

    dec = [m for m in members if pa.types.is_decimal(m.column.type)]
    days = [m for m in members if pa.types.is_date32(m.column.type)]
    micros = [m for m in members if pa.types.is_timestamp(m.column.type)]
    since = [
        F.when(_counted(m), m.val.try_cast("bigint"))
        .otherwise(F.unix_date(m.val.try_cast("date")))
        .alias(m.tag + "s")
        for m in days
    ] + [
        F.when(_counted(m), m.val.try_cast("bigint"))
        .otherwise(F.unix_micros(m.val.try_cast("timestamp")))
        .alias(m.tag + "s")
        for m in micros
    ]
    if not dec:
        return df.select("*", *since) if since else df
    df = df.select("*", *since, *[m.text()[0].alias(m.tag + "x") for m in dec])
    steps = []
    for m in dec:
        x, plain = m.part("x"), m.part("x").rlike(_plain_fit(m.column.type))
        parts = F.split(F.regexp_replace(x, _DECIMAL_PARTS, "$1,$2,$3,$4"), ",")
        steps += [
            plain.alias(m.tag + "q"),
            F.when(~plain, parts).alias(m.tag + "p"),
            (plain | x.rlike(_DECIMAL_TEXT)).alias(m.tag + "g"),
        ]
    df = df.select("*", *steps)
    steps = []
    for m in dec:
        whole, frac, sign, digits = (F.get(m.part("p"), i) for i in range(4))
        big = F.when(sign == F.lit("-"), F.lit(-(10**_EXP_DIGITS))).otherwise(10**_EXP_DIGITS)
        x = F.when(F.length(digits) > _EXP_DIGITS, big).otherwise(
            F.coalesce(F.concat(sign, digits).try_cast("bigint"), F.lit(0))
        )
        steps += [
            F.ltrim(F.concat(whole, frac), F.lit("0")).alias(m.tag + "l"),
            (x - F.length(frac)).alias(m.tag + "f"),  # the exponent of the last digit
        ]
    df = df.select("*", *steps)
    kept = [(m, F.rtrim(m.part("l"), F.lit("0"))) for m in dec]
    return df.select(
        "*",
        *[k.alias(m.tag + "k") for m, k in kept],
        *[(m.part("f") + F.length(m.part("l")) - F.length(k)).alias(m.tag + "e") for m, k in kept],
    )


def _decimals(m: Member) -> Judgement:
    """Decimal text (a number's token, a string's content) that fits the column exactly.

    Text that fits as written is cast as it is. Other text (:func:`with_steps`) fits
    when it is zero, or when its significant digits ``D`` and the exponent ``E`` of the
    last have ``E >= -s`` and ``len(D) + E <= p - s``, and is then cast from ``±D E E``.
    Only values shown to fit are cast."""
    from pyspark.sql import functions as F

    t = m.column.type
    room, s = t.precision - t.scale, t.scale
    text, kept, exp = m.part("x"), m.part("k"), m.part("e")
    count = F.length(kept)
    fits = m.part("g") & ((count == 0) | ((count + exp <= F.lit(room)) & (exp >= F.lit(-s))))
    _, _, missing = m.text()
    nested = m.val.startswith("{") | m.val.startswith("[")  # (refused anyway)
    unread = missing & ~nested
    sign = F.when(text.startswith("-"), F.lit("-")).otherwise(F.lit(""))
    normal = F.when(count == 0, F.lit("0")).otherwise(
        F.concat(sign, kept, F.lit("E"), exp.cast("string"))
    )
    shown = F.when(unread, F.lit(None)).when(m.part("q"), text).when(fits, normal)
    oor = m.part("g") & (count > 0) & (count + exp > F.lit(room))
    return Judgement(shown.try_cast(_sql_type(t)), oor, unread)


def _floats(m: Member) -> Judgement:
    """Numbers as doubles (float32: then floats); a finite text beyond the type is out of
    range (a refused text of a finite number can only be that)."""
    from pyspark.sql import functions as F

    text, _, missing = m.text()
    d = text.try_cast("double")
    typed = d if m.column.type == pa.float64() else d.cast("float")
    finite = text.rlike(_FINITE_TEXT)
    beyond = F.coalesce((F.abs(typed) == F.lit(float("inf"))) & finite, F.lit(False))
    return Judgement(F.when(~missing & ~beyond, typed), finite, missing)


def _counted(m: Member) -> SparkColumn:
    """Whether a date or timestamp member's value is an integer (days, microseconds): its
    text is one and its token (where found) is no string."""
    _, number, missing = m.text()
    return number | missing


def _temporals(m: Member) -> Judgement:
    """Integers (days, microseconds) or ISO text (cast by Spark), within the range: the
    days or microseconds since the epoch ``s`` (:func:`with_steps`)."""
    from pyspark.sql import functions as F

    date = pa.types.is_date32(m.column.type)
    lo, hi = (MIN_DAY, MAX_DAY) if date else (MIN_MICROS, MAX_MICROS)
    since = m.part("s")
    value = F.date_from_unix_date(since.try_cast("int")) if date else F.timestamp_micros(since)
    # (ISO text beyond the range is out of range where its year has four digits: the
    # Python decoders read no other year)
    oor = since.isNotNull() & (_counted(m) | m.val.rlike("^[0-9]{4}-"))
    return Judgement(F.when(since.between(lo, hi), value), oor, F.lit(False))
