"""How a run's totals divide between bench processes and their sessions (pure)."""

from __future__ import annotations


def split(total: int, parts: int) -> list[int]:
    """``total`` in ``parts`` shares differing by at most one, larger shares first."""
    if parts < 1 or total < 0:
        raise ValueError(f"cannot split {total} into {parts} parts")
    q, r = divmod(total, parts)
    return [q + 1 if i < r else q for i in range(parts)]


def instance_share(total_sessions: int, total_orders: int, instances: int,
                   instance: int) -> tuple[int, list[int]]:
    """This instance's session count and the measured orders of each of its sessions.

    Orders are divided by session over the whole run, so the same totals measure the same load
    whether one process or several run it.
    """
    if not 0 <= instance < instances:
        raise ValueError(f"instance {instance} is not in 0..{instances - 1}")
    if total_sessions < instances:
        raise ValueError(f"{total_sessions} sessions cannot be shared by {instances} instances")
    sessions = split(total_sessions, instances)
    first = sum(sessions[:instance])
    per_session = split(total_orders, total_sessions)
    return sessions[instance], per_session[first:first + sessions[instance]]
