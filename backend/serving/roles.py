"""Who may do what in a room: viewers and the operator.

A viewer may generate, compare, watch the status and download images, and stop its own run. The
operator may also do what changes the device for everyone: start and stop the tensor-parallel group,
clear the compile caches, lock to warm shapes, run warm-ups, stop anyone's run and read rank logs.

The operator is whoever holds the operator credential, checked here (the backend), whatever the
page shows: either the ``--operator-auth`` user:pass pairs, or, when none are given, a token the app
makes at start and prints as an operator link (Jupyter's habit). Either one is exchanged, at
``/operator``, for this run's operator session key, which the browser then sends as a cookie;
every other caller — loopback included, ``--auth`` users included — is a viewer. The CLI and the
app itself act as ``LOCAL_OPERATOR`` (whoever runs the process owns the machine).

No gradio here: the UI reads the cookie and the page session and asks ``OperatorKey.caller``.
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
    """Who is asking: their role and the owner their runs are held by on the job board
    (``backend.serving.jobs.Owner``: a page session, an API key, ...; None owns nothing)."""

    role: Role
    owner: Owner | None = None

    @property
    def is_operator(self) -> bool:
        return self.role == OPERATOR

    def require_operator(self, action: str) -> None:
        """Raise NotAllowed unless this caller is the operator."""
        if not self.is_operator:
            raise NotAllowed(f"{action} is for the operator; this page is a viewer's (open the operator link "
                             f"the app printed at start, or log in at /operator)")


LOCAL_OPERATOR = Caller(OPERATOR, LOCAL)  # the CLI and the app's own start-up work


def api_caller(key_name: str | None, address: str) -> Caller:
    """The caller of an Images API request: a viewer whose runs are owned by its key (or, without
    --api-keys, by its loopback address)."""
    return Caller(VIEWER, Owner(OwnerKind.API_KEY, key_name) if key_name else Owner(OwnerKind.API_ADDRESS, address))


def page_caller(operator: bool, session: str | None) -> Caller:
    """The caller of a page event (or a gradio_client call): its runs are owned by its page session."""
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
        self._session_key = secrets.token_urlsafe(32)

    def rotate(self) -> None:
        """The operator logs out: a new session key (every operator cookie is now a viewer's) and,
        without --operator-auth, a new token (the old link no longer logs in)."""
        self._session_key = secrets.token_urlsafe(32)
        if self.token is not None:
            self.token = secrets.token_urlsafe(32)

    def link(self, base_url: str) -> str | None:
        """The operator link to print (None when operators log in with --operator-auth)."""
        return f"{base_url.rstrip('/')}/operator?token={self.token}" if self.token else None

    def check_token(self, token: str | None) -> bool:
        return bool(self.token and token) and hmac.compare_digest(str(token).encode(), self.token.encode())

    def check_login(self, user: str | None, password: str | None) -> bool:
        found = False
        for u, p in self.pairs:  # compare every pair: no early exit that times the list
            found |= hmac.compare_digest(f"{u}:{p}".encode(), f"{user}:{password}".encode())
        return bool(self.pairs) and found

    @property
    def session_key(self) -> str:
        """What the operator's browser sends back as the ``COOKIE`` cookie."""
        return self._session_key

    def caller(self, cookie: str | None, session: str | None) -> Caller:
        """The caller of a page event: the operator if the cookie holds this run's key, else a viewer."""
        ok = bool(cookie) and hmac.compare_digest(str(cookie).encode(), self._session_key.encode())
        return page_caller(ok, session)
