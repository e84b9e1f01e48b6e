"""An operator's write to the controller loop, with the refusals every write API shares.

Owns: `submit_write`. A standby answers NOT_CONTROLLER (so clients go to the leader), and
while a ZooKeeper migration's write-behind lags, writes are held and then answered
REQUEST_TIMED_OUT, retriable for every client (KIP-866). A controller whose metadata log
failed (ENOSPC, EIO) answers KAFKA_STORAGE_ERROR, retriable, until its disk is back. Each API gives its own `refuse`
(code, message) -> body, because every API reports errors in its own shape.
"""

from __future__ import annotations

from typing import Any, Callable

from protocol.errors import ErrorCode
from server.controller.loop import ControllerStorageError, NotControllerError, WritesBlockedError


def not_controller_message(leader_id) -> str:
    return f"This node is not the active controller (leader: {leader_id})."


async def submit_write(node, command, refuse: Callable[[int, str], dict], *,
                       gated: bool = True) -> tuple[Any, dict | None]:
    """(the command's ControllerResult, None) once committed, or (None, the API's refusal)."""
    try:
        return await node.submit(command, gated=gated), None
    except WritesBlockedError as exc:
        return None, refuse(ErrorCode.REQUEST_TIMED_OUT, str(exc))
    except ControllerStorageError as exc:
        return None, refuse(ErrorCode.KAFKA_STORAGE_ERROR, str(exc))
    except NotControllerError as exc:
        return None, refuse(ErrorCode.NOT_CONTROLLER, not_controller_message(exc.leader_id))
