"""moto's server, with the SQS queue's message list guarded by its own lock.

moto 5.2.4 rebuilds a queue's message list on DeleteMessage without the queue's lock, while
SendMessage appends under it and ReceiveMessage reads it unguarded. Under concurrent requests a
delete can therefore put back messages another delete just removed (a deleted offer comes back as
a stale one) or drop a message sent meanwhile (an offer lost); a receive that moves a message to
the dead-letter queue races the same way. Amazon SQS does none of this at any rate a test could
see, so the test bed holds the queue's lock over a delete and a receive, and otherwise runs moto
unchanged.

Run as moto.server is: python3 server.py -H 127.0.0.1 -p 5000
"""

import functools
import sys

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


models.Queue.delete_message = _guard_delete(models.Queue.delete_message)
models.SQSBackend.receive_message = _guard_receive(models.SQSBackend.receive_message)

if __name__ == "__main__":
    from moto.server import main

    main(sys.argv[1:])
