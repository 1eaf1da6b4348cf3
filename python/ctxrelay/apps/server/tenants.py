"""API keys and tenants: who is asking, and which part of the store is theirs.

A key is ``crk_<id>_<secret>``: ``id`` (12 hex digits) finds the record, the
secret (32 random bytes, URL-safe base64) proves it.  The keys file keeps, per
key, the tenant, a random salt and ``sha256(salt + secret)``, never the secret;
the secret is high-entropy, so a salted SHA-256 compared with
``hmac.compare_digest`` is enough (a slow hash such as scrypt guards
low-entropy passwords, and would cost every request milliseconds).

The file is JSON (``{"keys": [...]}``), written atomically by ``ctxrelay keys``;
the relay re-reads it when its modification time changes, so a revoked key is
refused from the next request on without a restart.  ``$CTXRELAY_RELAY_KEYS``
may hold the same JSON instead of a file (a container's secret).

Scoping: a tenant's session ``S`` is stored as ``@<tenant>/S`` and its facts
live in the CKF namespace ``tenant:<tenant>``; neither ever reaches the client.
Client session ids that start with ``@`` are refused, keyed or not, so no
client can name a stored id directly.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import secrets
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ctxrelay.errors import InvalidArgumentError

KEYS_ENV = "CTXRELAY_RELAY_KEYS"
KEY_PREFIX = "crk_"
TENANT_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
_KEY_RE = re.compile(r"crk_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")
#: The limits a key may set; absent ones are unlimited.
LIMIT_NAMES = ("requests_per_minute", "body_bytes_per_minute", "stored_bytes")
#: Client session ids are at most this long, so the stored id fits the store's 256.
MAX_CLIENT_SESSION_CHARS = 180
RESERVED_PREFIX = "@"


def _digest(salt: str, secret: str) -> str:
    return hashlib.sha256(bytes.fromhex(salt) + secret.encode("ascii")).hexdigest()


def check_tenant(name: Any) -> str:
    if not isinstance(name, str) or not TENANT_RE.fullmatch(name):
        raise InvalidArgumentError(
            f"tenant must be 1-63 characters of a-z, 0-9, '_' or '-' starting with a letter "
            f"or digit, not {name!r}")
    return name


def check_limits(limits: Mapping[str, Any]) -> dict[str, int]:
    out = {}
    for name, value in limits.items():
        if name not in LIMIT_NAMES:
            raise InvalidArgumentError(f"unknown limit {name!r}; use {', '.join(LIMIT_NAMES)}")
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidArgumentError(f"limit {name} must be a positive integer, not {value!r}")
        out[name] = value
    return out


@dataclass(frozen=True)
class KeyRecord:
    """One key as the keys file keeps it (no secret)."""

    id: str
    tenant: str
    salt: str
    hash: str
    created: float
    revoked: bool = False
    limits: dict[str, int] = field(default_factory=dict)
    name: str = ""


@dataclass(frozen=True)
class Tenant:
    """The caller of one request: its tenant, its key id and the key's limits."""

    name: str
    key_id: str
    limits: Mapping[str, int]

    @property
    def prefix(self) -> str:
        return f"{RESERVED_PREFIX}{self.name}/"

    @property
    def namespace(self) -> str:
        return f"tenant:{self.name}"

    def storage_session(self, client_session: str) -> str:
        return self.prefix + client_session


def _records(data: Any, where: str) -> dict[str, KeyRecord]:
    if not isinstance(data, dict) or not isinstance(data.get("keys"), list):
        raise InvalidArgumentError(f"{where} must be a JSON object {{\"keys\": [...]}}; "
                                   "create it with `ctxrelay keys create`")
    out = {}
    for item in data["keys"]:
        try:
            record = KeyRecord(**item)
            check_tenant(record.tenant)
            check_limits(record.limits)
        except (TypeError, InvalidArgumentError) as e:
            raise InvalidArgumentError(f"{where}: a malformed key record ({e}); "
                                       "recreate the key with `ctxrelay keys create`") from None
        out[record.id] = record
    return out


class KeyFile:
    """The keys file: read, create, list and revoke (what ``ctxrelay keys`` does)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def load(self) -> dict[str, KeyRecord]:
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise InvalidArgumentError(f"cannot read the keys file {self.path}: {e}") from None
        return _records(data, f"the keys file {self.path}")

    def _save(self, records: Mapping[str, KeyRecord]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        body = json.dumps({"keys": [asdict(r) for r in records.values()]}, indent=1)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".keys-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)      # readers see the old file or the new, never half
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def create(self, tenant: str, *, name: str = "",
               limits: Mapping[str, Any] | None = None) -> tuple[str, KeyRecord]:
        """A new key for ``tenant``: returns the key (shown once) and its record."""
        check_tenant(tenant)
        records = self.load()
        key_id = secrets.token_hex(6)
        secret = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode("ascii").rstrip("=")
        salt = secrets.token_hex(16)
        record = KeyRecord(id=key_id, tenant=tenant, salt=salt, hash=_digest(salt, secret),
                           created=time.time(), limits=check_limits(limits or {}), name=name)
        records[key_id] = record
        self._save(records)
        return f"{KEY_PREFIX}{key_id}_{secret}", record

    def revoke(self, key_id: str) -> KeyRecord:
        records = self.load()
        if key_id.startswith(KEY_PREFIX):           # the whole key given: take its id
            m = _KEY_RE.fullmatch(key_id)
            key_id = m.group(1) if m else key_id
        if key_id not in records:
            raise InvalidArgumentError(f"no key {key_id!r} in {self.path}; "
                                       "`ctxrelay keys list` shows the ids")
        record = KeyRecord(**{**asdict(records[key_id]), "revoked": True})
        records[key_id] = record
        self._save(records)
        return record


class KeyRing:
    """The keys a running relay accepts: the file (re-read when it changes) or the env."""

    def __init__(self, path: Path | None, env_json: str | None = None) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        if env_json is not None:
            try:
                data = json.loads(env_json)
            except ValueError as e:
                raise InvalidArgumentError(f"${KEYS_ENV} is not JSON ({e})") from None
            self._records = _records(data, f"${KEYS_ENV}")
        else:
            self._records = {}
            self._refresh()

    @classmethod
    def configured(cls, path: Path | None) -> "KeyRing | None":
        env = os.environ.get(KEYS_ENV)
        if path is None and not env:
            return None
        return cls(path, env if path is None else None)

    def _refresh(self) -> None:
        if self._path is None:
            return
        try:
            st = self._path.stat()
        except FileNotFoundError:
            raise InvalidArgumentError(f"the keys file {self._path} does not exist; create a "
                                       "key with `ctxrelay keys create`") from None
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            self._records = KeyFile(self._path).load()
            self._stamp = stamp

    def tenant_of(self, key: str) -> Tenant | None:
        """The tenant of a presented key, or None (unknown, revoked or malformed)."""
        m = _KEY_RE.fullmatch(key)
        if m is None:
            return None
        with self._lock:
            self._refresh()
            record = self._records.get(m.group(1))
        if record is None or record.revoked:
            return None
        if not hmac.compare_digest(record.hash, _digest(record.salt, m.group(2))):
            return None
        return Tenant(name=record.tenant, key_id=record.id, limits=dict(record.limits))
