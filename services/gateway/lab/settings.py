"""The lab sessions' settings: one frozen object, read once from the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from shared.config import ConfigError, env_float, env_int, env_opt_str
from shared.fix.dictionary import DictionaryError, exchange_dictionary_file


def default_dictionary() -> str:
    """The exchange's FIX 4.4 dictionary (shared.fix.dictionary), derived from the installed one."""
    return str(exchange_dictionary_file())


@dataclass(frozen=True, slots=True)
class LabSettings:
    """The lab sessions' settings (FIXLAB_LAB_*); ``from_env`` reads and checks them once."""

    heartbeat_s: int = 6  # HeartBtInt of every lab session: a silent one ends within ~2.4x this
    lifetime_s: float = 600.0  # a lab session logs out after this long
    max_sessions: int = 20  # live lab sessions per gateway
    logon_timeout_s: float = 15.0  # give up a session that never logs on
    stream_maxlen: int = 5000  # approximate bound of each lab stream
    stream_ttl_s: int = 300  # a lab stream expires this long after its session ended
    claim_ttl_s: int = 60  # a CompID claim lapses this long after its gateway stopped renewing it
    start_max_age_s: float = 60.0  # an older LabStart (no gateway was up to take it) is refused
    data_dictionary: str = ""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> LabSettings:
        env = os.environ if env is None else env
        dictionary = env_opt_str(env, "FIXLAB_FIX44_XML")
        if dictionary is None:
            try:
                dictionary = default_dictionary()
            except DictionaryError as exc:
                raise ConfigError(str(exc)) from None
        if not Path(dictionary).is_file():
            raise ConfigError(f"FIXLAB_FIX44_XML: no FIX 4.4 data dictionary at {dictionary}")
        return cls(
            heartbeat_s=env_int(env, "FIXLAB_LAB_HEARTBEAT_S", 6, lo=1, hi=300),
            lifetime_s=env_float(env, "FIXLAB_LAB_LIFETIME_S", 600.0, lo=1.0),
            max_sessions=env_int(env, "FIXLAB_LAB_MAX_SESSIONS", 20, lo=1, hi=64),
            logon_timeout_s=env_float(env, "FIXLAB_LAB_LOGON_TIMEOUT_S", 15.0, lo=1.0),
            stream_maxlen=env_int(env, "FIXLAB_LAB_STREAM_MAXLEN", 5000, lo=100),
            stream_ttl_s=env_int(env, "FIXLAB_LAB_STREAM_TTL_S", 300, lo=1),
            claim_ttl_s=env_int(env, "FIXLAB_LAB_CLAIM_TTL_S", 60, lo=5),
            start_max_age_s=env_float(env, "FIXLAB_LAB_START_MAX_AGE_S", 60.0, lo=1.0),
            data_dictionary=dictionary,
        )
