// Package offers is Hangar's resource pool: one SQS queue per pool, one message per idle (or
// stopped) instance (docs/design.md §8).
//
// SQS is a hint and DynamoDB the truth. Publish puts an instance's message on its pool's queue;
// Selector.Claim receives messages in batches, keeps those that fit a Request, and claims them
// with the conditional idle→claimed (or stopped→claimed) write of package state. A message is
// deleted only after its claim is won, or once it is known to be stale; what does not fit is given
// back to the queue for other workflows; poison is moved to the dead-letter queue.
package offers
