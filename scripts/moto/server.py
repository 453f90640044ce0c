"""moto's server, with the SQS queue's message list guarded by its own lock.

moto 5.2.4 rebuilds a queue's message list on DeleteMessage without the queue's lock, while
SendMessage appends under it and ReceiveMessage reads it unguarded. Under concurrent requests a
delete can therefore put back messages another delete just removed (a deleted offer comes back as
a stale one) or drop a message sent meanwhile (an offer lost); a receive that moves a message to
the dead-letter queue races the same way. Amazon SQS does none of this at any rate a test could
see, so the test bed holds the queue's lock over a delete and a receive.

moto also routes every request under one server-wide lock, inside which it lists its own package
directory (some 150 stat calls) to find the request's service: under a burst every request queues
behind that scan, and the emulator, not the code under test, sets the pace. The list never
changes while the server runs, so the test bed reads it once. Its per-request log lines go too.

And a receive checks each message's retention by computing all of its queue's attributes three
times (each a pass over every message, delayed and in flight included): with hundreds of delayed
messages on a queue, a receive costs milliseconds per message under the queue's lock, which every
send and receive of that queue then waits for. The test bed reads the one attribute it needs.
Whether a message is visible or delayed is asked of each message on every send and receive (a
send computes the queue's counts); moto answers through a datetime round trip, the test bed
through the clock it stands for.

The rest is what every request pays in moto's one interpreter, which a burst's requests queue
for. A request's service is found by trying the host against every service's URL patterns, under
the server-wide lock: the answer for a host never changes, and is kept. Each request lists its
handler class's methods (inspect.getmembers): the list never changes either. The response goes
out in one write, not one per header block and body part. And a thread back from the socket waits
for the interpreter at most half a millisecond, not five: moto's threads mostly wait on sockets,
and at five milliseconds a hand-over, a request making four socket calls behind a busy thread
could wait twenty.

Run as moto.server is: python3 server.py -H 127.0.0.1 -p 5000
"""

import functools
import logging
import sys
import time

from moto import backends
from moto.core import responses as core_responses
from moto.core.utils import unix_time
from moto.moto_server.werkzeug_app import DomainDispatcherApplication
from moto.sqs import models
from werkzeug.serving import WSGIRequestHandler


def _guard_delete(delete):
    @functools.wraps(delete)
    def guarded(self, receipt_handle):
        with self._messages_lock:
            return delete(self, receipt_handle)

    return guarded


def _guard_receive(receive):
    @functools.wraps(receive)
    def guarded(self, queue_name, *args, **kwargs):
        # Moving a message to the dead-letter queue removes it from the list too; the lock is
        # re-entrant and a long poll's wait releases it.
        with self.get_queue(queue_name)._messages_lock:
            return receive(self, queue_name, *args, **kwargs)

    return guarded


def _retained(self, queue_name, message):
    retention = int(self.get_queue(queue_name).message_retention_period)
    return retention + message.sent_timestamp / 1000 > unix_time()


_MODULES = frozenset(backends.list_of_moto_modules())
backends.list_of_moto_modules = lambda: _MODULES
logging.getLogger("werkzeug").setLevel(logging.WARNING)

models.SQSBackend.is_message_valid_based_on_retention_period = _retained
models.Message.visible = property(lambda self: time.time() * 1000 > self.visible_at)
models.Message.delayed = property(lambda self: time.time() * 1000 < self.delayed_until)
models.Queue.delete_message = _guard_delete(models.Queue.delete_message)
models.SQSBackend.receive_message = _guard_receive(models.SQSBackend.receive_message)


def _cached_backend(get_backend):
    backend_of = {}

    @functools.wraps(get_backend)
    def cached(self, host):
        if host not in backend_of:
            backend_of[host] = get_backend(self, host)
        return backend_of[host]

    return cached


DomainDispatcherApplication.get_backend_for_host = _cached_backend(DomainDispatcherApplication.get_backend_for_host)
core_responses.method_names_from_class = functools.lru_cache(maxsize=None)(core_responses.method_names_from_class)
WSGIRequestHandler.wbufsize = -1
sys.setswitchinterval(0.0005)

if __name__ == "__main__":
    from moto.server import main

    main(sys.argv[1:])
