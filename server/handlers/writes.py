"""A write to the controller loop, with the refusals every write API shares (an
operator's and the brokers' own RPCs alike).

Owns: `submit_write`. A standby answers NOT_CONTROLLER (so clients go to the leader), and
while a ZooKeeper migration's write-behind lags, writes are held and then answered
REQUEST_TIMED_OUT, retriable for every client (KIP-866); the brokers' RPCs are not held
(`gated=False`). A controller whose metadata log
failed (ENOSPC, EIO) answers KAFKA_STORAGE_ERROR, retriable, until its disk is back. Each
refusal is an `ApiError`: the dispatcher answers it in the API's own error shape (its
catalog entry's error_response), since every API reports errors differently.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from server.api.context import Command, ControllerWrites
from server.api.errors import ApiError
from server.controller.commands import ControllerResult
from server.controller.loop import ControllerStorageError, NotControllerError, WritesBlockedError


def not_controller_message(leader_id) -> str:
    return f"This node is not the active controller (leader: {leader_id})."


async def submit_write(services: ControllerWrites, command: Command, *, gated: bool = True) -> ControllerResult:
    """The command's ControllerResult once committed; raises ApiError when the write is refused."""
    try:
        return await services.submit(command, gated=gated)
    except WritesBlockedError as exc:
        raise ApiError(ErrorCode.REQUEST_TIMED_OUT, str(exc)) from None
    except ControllerStorageError as exc:
        raise ApiError(ErrorCode.KAFKA_STORAGE_ERROR, str(exc)) from None
    except NotControllerError as exc:
        raise ApiError(ErrorCode.NOT_CONTROLLER, not_controller_message(exc.leader_id)) from None
