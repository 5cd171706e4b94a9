"""What is a secret, and how one is shown: the one rule every repr, error and log line of
cdc_sink follows.

A value is secret by its *name* or by *what it is*, whichever says so first:

- by name (:func:`is_secret_key`): a password, secret, token, credential, key
  (``ssl.keystore.key``, ``account_key``, ``sas_key``; not ``access_key_id``, not a
  ``*.location`` path), JAAS or OAuth configuration, basic-auth user info;
- by value (:func:`is_secret_value`): a PEM private key, a URL with user info
  (``https://user:pw@host``), a query parameter that signs or authenticates
  (``sig=``, ``token=``, ``X-Amz-Signature=``), or an inline ``password=``/``clientSecret=``
  assignment (JAAS and OAuth configurations).

A secret is shown as :data:`MASK`: never its length, never a prefix. A URL keeps its
scheme, host and path and loses only its user info and signing parameters
(:func:`mask_url`). Text built by another library (obstore's errors echo option values,
urllib's echo URLs) goes through :func:`scrub` with the values that must not appear.

Limits: a value shorter than :data:`MIN_SCRUBBED` characters is not searched for in
text (it would blank out ordinary words); a secret under a name this module does not know,
with nothing in its value to tell, is shown like any other value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

__all__ = [
    "MASK",
    "MIN_SCRUBBED",
    "has_userinfo",
    "is_secret",
    "is_secret_key",
    "is_secret_value",
    "mask",
    "mask_url",
    "masked",
    "masked_mapping",
    "scrub",
]

MASK = "***"
"""What a secret is shown as."""

MIN_SCRUBBED = 4
"""Values shorter than this are not searched for by :func:`scrub`."""

_SECRET_NAME = re.compile(
    r"passw(or)?d|passphrase|(^|[._-])pass($|[._-])|pwd|secret|token|credential|jaas"
    r"|private|user[._-]?info|oauthbearer[._-]config|api[._-]?key|sas([._-]|$)"
    r"|(^|[._-])key([._-]pem)?$|(^|[._-])auth(orization)?$",
    re.IGNORECASE,
)
# names of paths, URLs and sources: secret only if they also say password or secret
_NOT_A_VALUE = re.compile(r"[._-](location|file|path|url|endpoint|source)$", re.IGNORECASE)
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
_INLINE_SECRET = re.compile(
    r"(passw(or)?d|secret|token|credential|api[._-]?key)\w*[\"']?\s*[=:]", re.IGNORECASE
)
_URL = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>\S*)")
_PORT = re.compile(r"\d*")
_SECRET_PARAM = re.compile(
    r"^(sig|signature|x-amz-signature|x-amz-security-token|x-amz-credential|x-goog-signature"
    r"|x-goog-credential|token|access_token|password|secret|key|api_?key|code)$",
    re.IGNORECASE,
)
_QUERY_PARAM = re.compile(r"([?&;])([^=&;#\s]+)=([^&;#\s]*)")
# Azure's abfs URLs name the container where others put user info: container@account
_CONTAINER_SCHEMES = frozenset({"abfs", "abfss", "wasb", "wasbs"})


def is_secret_key(key: str) -> bool:
    """Whether a setting named ``key`` holds a secret, whatever its value."""
    if _NOT_A_VALUE.search(key):
        return bool(re.search(r"passw(or)?d|secret", key, re.IGNORECASE))
    return _SECRET_NAME.search(key) is not None


def is_secret_value(value: str) -> bool:
    """Whether ``value`` is a secret by what it holds (see the module docstring)."""
    if _PRIVATE_KEY.search(value) or _INLINE_SECRET.search(value):
        return True
    return has_userinfo(value) or mask_url(value) != value


def is_secret(key: str, value: str) -> bool:
    """Whether the setting ``key`` = ``value`` must be masked, by name or by value."""
    return is_secret_key(key) or is_secret_value(value)


def _userinfo_end(scheme: str, rest: str) -> int:
    """Where the user info of the URL ``scheme://rest`` ends (the index of its ``@`` in
    ``rest``), or -1 when it has none.

    The user info is what comes before the last ``@`` of the authority (a password may
    hold an unescaped ``@``). A password may also hold an unescaped ``/`` (AWS secret
    keys do), which ends the authority early: ``user:pa/ss@host`` is user info too when
    what follows the ``:`` is no port number. An abfs URL's ``container@account`` is
    none.
    """
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    end = authority.rfind("@")
    if end < 0 and ":" in authority and "@" in rest:
        port = authority.split(":", 1)[1]
        end = rest.find("@") if not _PORT.fullmatch(port) else -1
    if end < 0 or (scheme.lower() in _CONTAINER_SCHEMES and ":" not in rest[:end]):
        return -1
    return end


def has_userinfo(text: str) -> bool:
    """Whether ``text`` holds a URL with user info (``scheme://user[:pw]@host``); an abfs
    URL's ``container@account`` is none."""
    return any(_userinfo_end(m["scheme"], m["rest"]) >= 0 for m in _URL.finditer(text))


def mask(value: object) -> str:
    """A secret as shown: :data:`MASK`, whatever it is."""
    del value
    return MASK


def mask_url(url: str) -> str:
    """``url`` (or text holding URLs) without user info or signing query parameters:
    ``https://u:pw@host/p?sig=x&a=1`` is shown ``https://***@host/p?sig=***&a=1``."""

    def info(m: re.Match[str]) -> str:
        scheme, rest = m["scheme"], m["rest"]
        end = _userinfo_end(scheme, rest)
        return m[0] if end < 0 else f"{scheme}://{MASK}{rest[end:]}"

    def param(m: re.Match[str]) -> str:
        if _SECRET_PARAM.match(m.group(2)) and m.group(3):
            return f"{m.group(1)}{m.group(2)}={MASK}"
        return m.group(0)

    out = _URL.sub(info, url)
    return _QUERY_PARAM.sub(param, out) if "://" in out else out


def masked(key: str, value: str) -> str:
    """``value`` as the setting ``key`` may be shown: whole when it is no secret, the URL
    without its user info when only that is secret, else :data:`MASK`."""
    if is_secret_key(key) or _PRIVATE_KEY.search(value) or _INLINE_SECRET.search(value):
        return MASK
    return mask_url(value)


def masked_mapping(entries: Mapping[str, object]) -> dict[str, object]:
    """``entries`` with each str value :func:`masked` (other values kept as they are, but
    under a secret name)."""
    out: dict[str, object] = {}
    for k, v in entries.items():
        name = str(k)
        if isinstance(v, str):
            out[name] = masked(name, v)
        elif is_secret_key(name):
            out[name] = MASK
        elif isinstance(v, Mapping):
            out[name] = masked_mapping(v)
        else:
            out[name] = v
    return out


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every occurrence of each of ``secrets`` (of :data:`MIN_SCRUBBED`
    characters or more) replaced by :data:`MASK`, and every URL in it masked
    (:func:`mask_url`). Longer secrets first, so one inside another leaves no part."""
    for s in sorted({s for s in secrets if len(s) >= MIN_SCRUBBED}, key=len, reverse=True):
        text = text.replace(s, MASK)
    return mask_url(text)
