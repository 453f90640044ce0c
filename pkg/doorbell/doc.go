// Package doorbell owns each instance's doorbell: an SQS queue of its own, created with the
// instance and deleted with it, that carries no payload but "read your item". The control plane
// rings it right after every write the instance's agent waits for (a claim, a release); the agent
// long-polls it and reads its item the moment it rings, instead of polling the item every second.
//
// A doorbell says nothing: whatever the instance must know is in its item, which only it may
// read. The queue is tagged with the instance's ARN, and the instance role may receive only from
// queues so tagged (aws:ResourceTag), so an instance can neither hear nor silence another's
// bell; only the control plane may create, ring and delete bells. A lost ring costs latency, not
// correctness: the agent still reads its item with every heartbeat.
package doorbell
