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

Run as moto.server is: python3 server.py -H 127.0.0.1 -p 5000
"""

import functools
import logging
import sys
import time

from moto import backends
from moto.core.utils import unix_time
from moto.sqs import models


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

if __name__ == "__main__":
    from moto.server import main

    main(sys.argv[1:])
