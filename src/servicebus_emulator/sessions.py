"""Sessions: their locks, their state and how they are listed."""

from __future__ import annotations

from servicebus_emulator.model import (
    MAX_DATETIME_MS,
    NOT_ALLOWED,
    SESSION_CANNOT_BE_LOCKED,
    SESSION_LOCK_LOST,
    TIMEOUT,
    BrokerError,
    SessionState,
)
from servicebus_emulator.settlement import Settlement
from servicebus_emulator.store import Entity


class Sessions(Settlement):
    """Session locks and state on entities that require sessions."""

    def lock_session(self, path: str, session_id: str | None, owner: object) -> tuple[str, int]:
        """Locks a session (a given id, or the next one with available messages).

        Returns:
            (session id, locked-until ms).
        """
        with self.lock:
            entity = self.entity(path)
            self.check_faults(path)
            if not entity.requires_session:
                raise BrokerError(NOT_ALLOWED, f"'{entity.path}' does not require sessions.")
            now = self.clock.now_ms()
            self.housekeep(entity, now)
            lock_ms = entity.lock_ms
            if session_id is None:
                for sid, heap in sorted(entity.available.items(), key=lambda kv: min(kv[1] or [0])):
                    if not heap or sid is None:
                        continue
                    state = entity.sessions.setdefault(sid, SessionState())
                    if state.owner is None or state.locked_until_ms <= now:
                        session_id = sid
                        break
                if session_id is None:
                    raise BrokerError(TIMEOUT, "No session is available to accept.")
            state = entity.sessions.setdefault(session_id, SessionState())
            if state.owner is not None and state.owner is not owner and state.locked_until_ms > now:
                raise BrokerError(
                    SESSION_CANNOT_BE_LOCKED,
                    f"The requested session '{session_id}' cannot be accepted. It may be "
                    "locked by another receiver.",
                )
            state.owner = owner
            state.locked_until_ms = now + lock_ms
            return session_id, state.locked_until_ms

    def _session(self, entity: Entity, session_id: str, owner: object | None) -> SessionState:
        state = entity.sessions.get(session_id)
        if (
            state is None
            or (owner is not None and state.owner is not owner)
            or state.locked_until_ms <= self.clock.now_ms()
        ):
            raise BrokerError(
                SESSION_LOCK_LOST,
                f"The session lock has expired on the MessageSession '{session_id}'.",
            )
        return state

    def release_session(self, path: str, session_id: str, owner: object) -> None:
        with self.lock:
            entity = self.entity(path)
            state = entity.sessions.get(session_id)
            if state is not None and state.owner is owner:
                state.owner = None
                state.locked_until_ms = 0

    def renew_session(self, path: str, session_id: str, owner: object | None) -> int:
        with self.lock:
            entity = self.entity(path)
            state = self._session(entity, session_id, owner)
            state.locked_until_ms = self.clock.now_ms() + entity.lock_ms
            return state.locked_until_ms

    def get_session_state(self, path: str, session_id: str, owner: object | None) -> bytes | None:
        with self.lock:
            return self._session(self.entity(path), session_id, owner).state

    def set_session_state(
        self, path: str, session_id: str, state: bytes | None, owner: object | None
    ) -> None:
        with self.lock:
            s = self._session(self.entity(path), session_id, owner)
            s.state = state
            s.updated_ms = self.clock.now_ms()

    def list_sessions(self, path: str, last_updated_ms: int) -> list[str]:
        """Session ids, as ``get-message-sessions`` lists them.

        With the DateTime.MaxValue sentinel (the SDK's default) the sessions that hold
        messages; with a time, the sessions whose state was set at or after it.
        """
        with self.lock:
            entity = self.entity(path)
            if last_updated_ms >= MAX_DATETIME_MS:
                return sorted({m.session_id for m in entity.messages.values() if m.session_id})
            return sorted(
                sid for sid, s in entity.sessions.items() if s.updated_ms >= last_updated_ms
            )
