// Package doorbell owns each instance's doorbell: an SQS queue of its own, created with the
// instance and deleted with it. The control plane rings it right after every write the
// instance's agent waits for (a claim, a release); the agent long-polls it and reads its item the
// moment it rings, instead of polling the item every second.
//
// A plain ring says nothing but "read your item". A claim's ring is a hand-over: it also carries
// the assignment's one secret (a runner registration token, or a just-in-time runner
// configuration), so that no secret is ever written to the table. The queue is tagged with the
// instance's ARN, which only the instance itself and the stack's functions can set, in making it;
// the instance role may receive only from queues so tagged (aws:ResourceTag), no other role may
// receive from any doorbell, and a secret is sent only to a doorbell whose tag names the claimed
// instance, so a hand-over is readable by its instance alone. The agent takes only a hand-over
// whose secret the assignment names (state.SecretSum), so one pushed by anyone else is refused. Messages are encrypted at rest (SSE-SQS) and kept
// at most a few minutes. The agent keeps hand-overs in memory (Mailbox) and uses one only for the
// assignment its item holds at the hand-over's version. A lost ring costs latency, not
// correctness: the agent still reads its item with every heartbeat, and asks again for a
// hand-over it lacks.
package doorbell
