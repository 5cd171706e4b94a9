"""What a log line shows of an exception: the messages of its chain, as a traceback
prints them (a cause, or a context it does not suppress), without the source lines (a
test's own source may name a secret it passes)."""

from __future__ import annotations


def logged(exc: BaseException) -> str:
    """``exc``'s type and message, and those of every exception a traceback of it prints."""
    parts: list[str] = []
    seen: set[int] = set()
    at: BaseException | None = exc
    while at is not None and id(at) not in seen:
        seen.add(id(at))
        parts.append(f"{type(at).__module__}.{type(at).__name__}: {at}")
        at = at.__cause__ or (None if at.__suppress_context__ else at.__context__)
    return "\n".join(parts)
