"""Who may do what: viewers generate, compare, watch and stop their own runs; the operator also
changes the device for everyone (engines, caches, the warm-only lock, warm-ups, anyone's run, logs).

The operator holds the ``--operator-auth`` pairs or, without them, the token of the operator link
printed at start; ``/operator`` exchanges either for this run's session key, sent back as a cookie.
Every other caller, loopback and ``--auth`` users included, is a viewer. The CLI and the app itself
act as ``LOCAL_OPERATOR``.
"""

from __future__ import annotations

import dataclasses
import enum
import hmac
import secrets
from pathlib import Path

from backend.errors import NotAllowed
from backend.serving.jobs import LOCAL, Owner, OwnerKind


class Role(enum.StrEnum):
    OPERATOR = "operator"
    VIEWER = "viewer"


OPERATOR, VIEWER = Role
COOKIE = "neuron_studio_operator"


@dataclasses.dataclass(frozen=True)
class Caller:
    """Who is asking: their role and the job board's owner of their runs (None owns nothing)."""

    role: Role
    owner: Owner | None = None

    @property
    def is_operator(self) -> bool:
        return self.role == OPERATOR

    def require_operator(self, action: str) -> None:
        if not self.is_operator:
            raise NotAllowed(f"{action} is for the operator; this page is a viewer's (open the operator link "
                             f"the app printed at start, or log in at /operator)")


LOCAL_OPERATOR = Caller(OPERATOR, LOCAL)  # the CLI and the app's own start-up work


def api_caller(key_name: str | None, address: str) -> Caller:
    """An Images API viewer, owned by its key (without --api-keys, by its address)."""
    return Caller(VIEWER, Owner(OwnerKind.API_KEY, key_name) if key_name else Owner(OwnerKind.API_ADDRESS, address))


def page_caller(operator: bool, session: str | None) -> Caller:
    return Caller(OPERATOR if operator else VIEWER, Owner(OwnerKind.PAGE, session) if session else None)


def parse_pairs(spec: str, flag: str) -> list[tuple[str, str]]:
    """'user:pass', or a file with one user:pass per line (# comments allowed)."""
    path = Path(spec).expanduser()
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else [spec]
    pairs = []
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, password = line.partition(":")
        if not sep or not user or not password:
            raise ValueError(f"{flag}: expected user:pass (or a file of user:pass lines)")
        pairs.append((user, password))
    if not pairs:
        raise ValueError(f"{flag}: {spec} holds no user:pass line")
    return pairs


class OperatorKey:
    """This run's operator credential and session key (both random per start unless pairs are given)."""

    def __init__(self, pairs: list[tuple[str, str]] | None = None):
        self.pairs = list(pairs or [])
        self.token = None if self.pairs else secrets.token_urlsafe(32)
        self.session_key = secrets.token_urlsafe(32)

    def rotate(self) -> None:
        """The operator logs out: a new session key (every operator cookie is now a viewer's) and,
        without --operator-auth, a new token (the old link no longer logs in)."""
        self.session_key = secrets.token_urlsafe(32)
        if self.token is not None:
            self.token = secrets.token_urlsafe(32)

    def link(self, base_url: str) -> str | None:
        return f"{base_url.rstrip('/')}/operator?token={self.token}" if self.token else None

    def check_token(self, token: str | None) -> bool:
        return bool(self.token and token) and hmac.compare_digest(str(token).encode(), self.token.encode())

    def check_login(self, user: str | None, password: str | None) -> bool:
        found = False
        for u, p in self.pairs:  # compare every pair: no early exit that times the list
            found |= hmac.compare_digest(f"{u}:{p}".encode(), f"{user}:{password}".encode())
        return bool(self.pairs) and found

    def caller(self, cookie: str | None, session: str | None) -> Caller:
        ok = bool(cookie) and hmac.compare_digest(str(cookie).encode(), self.session_key.encode())
        return page_caller(ok, session)
