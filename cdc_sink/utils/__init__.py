"""Helpers the whole package shares, none of them a concept of the table:
Arrow array helpers (``arrays``), an ordered map over a thread pool (``parallel``),
lazy package exports (``lazy``), Python values of column types (``values``), the
optional dependencies and their errors (``extras``), and the one rule for secrets
(``redact``)."""
