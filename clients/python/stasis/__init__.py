"""A Python client of stasisd, Stasis's node service.

The procedures and messages are those of api/proto/stasis/v1/stasis.proto,
generated into stasis.v1 (scripts/gen-api.sh); Client calls them over gRPC
on stasisd's unix socket and turns a failure into a StasisError whose
category is the one stasisd answered with (docs/service.md, "Errors")::

    from stasis import Client, NotFound

    with Client() as c:                      # /run/stasis/stasisd.sock
        a = c.run("counter", "a1")           # an Actor message, RUNNING
        c.suspend("a1")
        for event in c.events("a1"):         # follows the actor's history
            print(event.step, event.message)
"""

import grpc
from google.protobuf import json_format

from stasis.v1 import stasis_pb2 as pb
from stasis.v1 import stasis_pb2_grpc

__all__ = [
    "Client", "StasisError", "InvalidArgument", "NotFound", "AlreadyExists", "FailedPrecondition",
    "Busy", "Corrupt", "Unavailable", "DeadlineExceeded", "ResourceExhausted", "Canceled",
    "PermissionDenied", "pb",
]

DEFAULT_SOCKET = "/run/stasis/stasisd.sock"


class StasisError(Exception):
    """A call stasisd refused or failed: category is its error category
    (not_found, aborted, ...; internal when it has none), message
    stasisd's, which names the cause and the fix."""

    category = "internal"

    def __init__(self, message, category=None):
        super().__init__(message)
        self.message = message
        if category is not None:
            self.category = category

    def __str__(self):
        return f"{self.category}: {self.message}"


class InvalidArgument(StasisError):
    category = "invalid_argument"


class NotFound(StasisError):
    category = "not_found"


class AlreadyExists(StasisError):
    category = "already_exists"


class FailedPrecondition(StasisError):
    """The actor is in the wrong state, or a preflight or compatibility
    check refused."""
    category = "failed_precondition"


class Busy(StasisError):
    """Another operation holds the actor; retry when it has ended."""
    category = "aborted"


class Corrupt(StasisError):
    category = "data_loss"


class Unavailable(StasisError):
    category = "unavailable"


class DeadlineExceeded(StasisError):
    category = "deadline_exceeded"


class ResourceExhausted(StasisError):
    category = "resource_exhausted"


class Canceled(StasisError):
    category = "canceled"


class PermissionDenied(StasisError):
    category = "permission_denied"


_BY_CATEGORY = {cls.category: cls for cls in (
    InvalidArgument, NotFound, AlreadyExists, FailedPrecondition, Busy, Corrupt, Unavailable,
    DeadlineExceeded, ResourceExhausted, Canceled, PermissionDenied)}


def _error(err):
    """The StasisError of a gRPC failure: its status code names the
    category (gRPC's codes are the categories' names)."""
    category = err.code().name.lower() if err.code() else "internal"
    return _BY_CATEGORY.get(category, StasisError)(err.details() or str(err))


def _call(method, request, **kwargs):
    try:
        return method(request, **kwargs)
    except grpc.RpcError as err:
        raise _error(err) from None


class Client:
    """stasisd on the unix socket at socket. timeout (seconds) bounds each
    unary call; None waits as long as the operation runs (a suspend of a
    large GPU actor takes a while)."""

    def __init__(self, socket=DEFAULT_SOCKET, timeout=None):
        self._channel = grpc.insecure_channel("unix:" + socket)
        self._stub = stasis_pb2_grpc.StasisStub(self._channel)
        self._timeout = timeout

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _unary(self, method, request):
        return _call(method, request, timeout=self._timeout)

    # Templates.

    def create_template(self, template):
        """Creates a template from a pb.Template or a dict of its JSON
        fields ({"name": ..., "bundle": ...})."""
        if isinstance(template, dict):
            template = json_format.ParseDict(template, pb.Template())
        return self._unary(self._stub.CreateTemplate, template)

    def templates(self):
        return list(self._unary(self._stub.ListTemplates, pb.Empty()).templates)

    # Actors.

    def run(self, template, id="", request_id="", cold=False, from_stored=""):
        """Starts actor id (one is named when empty) of template; returns
        it RUNNING."""
        return self._unary(self._stub.Run, pb.RunRequest(template=template, id=id, request_id=request_id,
                                                         cold=cold, from_stored=from_stored))

    def actors(self):
        return list(self._unary(self._stub.ListActors, pb.Empty()).actors)

    def inspect(self, id):
        return self._unary(self._stub.InspectActor, pb.ActorID(id=id))

    def pause(self, id, request_id=""):
        return self._unary(self._stub.Pause, pb.OpRequest(id=id, request_id=request_id))

    def suspend(self, id, request_id=""):
        return self._unary(self._stub.Suspend, pb.OpRequest(id=id, request_id=request_id))

    def resume(self, id, request_id=""):
        return self._unary(self._stub.Resume, pb.OpRequest(id=id, request_id=request_id))

    def delete(self, id, purge=False, request_id="", force=False):
        """Deletes the actor; force goes past a network its CNI plugins
        cannot remove (the answer's network_left says what they may hold)."""
        return self._unary(self._stub.Delete, pb.DeleteRequest(id=id, purge=purge, request_id=request_id, force=force))

    def exec(self, id, args, stdin=b""):
        """Runs args in the running actor; returns a pb.ExecResult
        (exit_code, stdout, stderr)."""
        return self._unary(self._stub.Exec, pb.ExecRequest(id=id, args=list(args), stdin=stdin))

    def events(self, id="", after=0):
        """The actor's history (every actor's with id empty) after
        sequence number after, then each event as it happens: an iterator
        that ends when the actor is deleted, or raises the StasisError that
        ended it. Close it (or break out of the loop) to stop following."""
        stream = self._stub.WatchEvents(pb.EventsRequest(id=id, after=after))
        try:
            for event in stream:
                yield event
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.CANCELLED and stream.cancelled():
                return
            raise _error(err) from None
        finally:
            stream.cancel()

    # The node.

    def node_status(self):
        return self._unary(self._stub.NodeStatus, pb.Empty())
