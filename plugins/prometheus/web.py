"""TLS and basic auth for /metrics, configured with the keys of Prometheus exporter-toolkit's web config.

exporter-toolkit (the Go exporters' `--web.config.file`) has a YAML file with
`tls_server_config` and `basic_auth_users`; here the same keys are TOML tables
under `[sinks.prometheus]`: `[sinks.prometheus.tls_server_config]` (cert_file,
key_file, client_ca_file, client_auth_type, min_version, max_version) and
`[sinks.prometheus.basic_auth_users]` (user = bcrypt hash, as `htpasswd -nbB`
or Python's bcrypt makes it). As in exporter-toolkit, the certificate and key
are read again when their files change (a renewed certificate needs no
restart), and a password that matched once is remembered (a bcrypt check costs
tens of milliseconds; Prometheus sends the same one every scrape).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import threading
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from gpuagent.errors import AgentError

if TYPE_CHECKING:
    import ssl

# Names in the ssl module, looked up when a context is built: ssl (4 MB) is imported only by an
# agent that serves TLS (tests/test_lazy_imports.py).
_VERSIONS = {"TLS10": "TLSv1", "TLS11": "TLSv1_1", "TLS12": "TLSv1_2", "TLS13": "TLSv1_3"}
# exporter-toolkit's names. RequestClientCert and RequireAnyClientCert (a certificate asked for but
# not verified) have no counterpart in OpenSSL through Python's ssl module: refused by the model.
_CLIENT_AUTH = {
    "NoClientCert": "CERT_NONE",
    "VerifyClientCertIfGiven": "CERT_OPTIONAL",
    "RequireAndVerifyClientCert": "CERT_REQUIRED",
}
TlsVersion = Literal["TLS10", "TLS11", "TLS12", "TLS13"]


class TlsServerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    cert_file: str
    key_file: str
    client_auth_type: Literal["NoClientCert", "VerifyClientCertIfGiven", "RequireAndVerifyClientCert"] = "NoClientCert"
    client_ca_file: str = ""
    min_version: TlsVersion = "TLS12"  # exporter-toolkit's default
    max_version: TlsVersion = "TLS13"


def check_bcrypt_hash(user: str, value: str) -> str:
    if not value.startswith(("$2a$", "$2b$", "$2y$")) or len(value) != 60:
        raise ValueError(
            f'basic_auth_users.{user}: expected a bcrypt hash ("$2y$10$…", 60 characters), '
            "not a password: make one with `htpasswd -nbB USER PASSWORD`"
        )
    return value


def validate_users(users: dict[str, str]) -> dict[str, str]:
    for user, value in users.items():
        if not user or ":" in user:
            raise ValueError(f'basic_auth_users: user "{user}" must be non-empty and without ":"')
        check_bcrypt_hash(user, value)
    if users:
        try:
            import bcrypt  # noqa: F401
        except ImportError:
            raise ValueError("basic_auth_users needs the bcrypt module (pip install bcrypt)") from None
    return users


class CertReloader:
    """An SSLContext that is built again when the certificate or key file changes."""

    def __init__(self, tls: TlsServerConfig):
        self.tls = tls
        self._lock = threading.Lock()
        self._stamp: tuple | None = None
        self._context: ssl.SSLContext | None = None
        self.context()  # a bad file stops the start, with its name

    def _files_stamp(self) -> tuple:
        out = []
        for path in (self.tls.cert_file, self.tls.key_file, self.tls.client_ca_file):
            if path:
                st = os.stat(path)
                out.append((st.st_mtime_ns, st.st_size, st.st_ino))
        return tuple(out)

    def _build(self) -> ssl.SSLContext:
        import ssl

        tls = self.tls
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = getattr(ssl.TLSVersion, _VERSIONS[tls.min_version])
        ctx.maximum_version = getattr(ssl.TLSVersion, _VERSIONS[tls.max_version])
        try:
            ctx.load_cert_chain(tls.cert_file, tls.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise AgentError(
                f"sinks.prometheus.tls_server_config: cannot load cert_file {tls.cert_file} / "
                f"key_file {tls.key_file}: {getattr(exc, 'strerror', None) or exc}"
            ) from None
        ctx.verify_mode = getattr(ssl, _CLIENT_AUTH[tls.client_auth_type])
        if tls.client_ca_file:
            try:
                ctx.load_verify_locations(cafile=tls.client_ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise AgentError(
                    f"sinks.prometheus.tls_server_config: cannot load client_ca_file "
                    f"{tls.client_ca_file}: {getattr(exc, 'strerror', None) or exc}"
                ) from None
        return ctx

    def context(self) -> ssl.SSLContext:
        with self._lock:
            try:
                stamp = self._files_stamp()
            except OSError as exc:
                if self._context is None:
                    raise AgentError(f"sinks.prometheus.tls_server_config: {exc.filename}: {exc.strerror}") from None
                return self._context  # a file being replaced: keep serving with the one loaded
            if stamp != self._stamp:
                try:
                    self._context = self._build()
                except AgentError:
                    if self._context is None:
                        raise
                self._stamp = stamp
            assert self._context is not None  # built once, or the AgentError above
            return self._context


class BasicAuth:
    """Checks an `Authorization: Basic …` header against bcrypt hashes."""

    MAX_REMEMBERED = 64

    def __init__(self, users: dict[str, str]):
        self.users = dict(users)
        self._good: set[bytes] = set()  # sha256 of "user:password" that matched once
        self._lock = threading.Lock()

    def allows(self, header: str | None) -> bool:
        import bcrypt

        if not header or not header[:6].lower() == "basic ":
            return False
        try:
            user, sep, password = base64.b64decode(header[6:].strip(), validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        hashed = self.users.get(user)
        if not sep or hashed is None:
            return False
        key = hashlib.sha256(f"{user}:{password}:{hashed}".encode()).digest()
        with self._lock:
            if any(hmac.compare_digest(key, good) for good in self._good):
                return True
        try:
            ok = bcrypt.checkpw(password.encode(), hashed.encode())
        except ValueError:
            return False
        if ok:
            with self._lock:
                if len(self._good) >= self.MAX_REMEMBERED:
                    self._good.clear()
                self._good.add(key)
        return ok
