// Package pool is Hangar's pool of instances, which both doors (the steps and the labels) and
// refresh share. A Pool owns every moment of an instance's life that touches its item and EC2 or
// its pool's queue, so that each is done one way:
//
//   - Acquire: what a door asks for, claimed from the pool's warm instances first (its queue,
//     package offers), the stopped ones among them started, the rest launched with one EC2 Fleet
//     request (package fleet) and recorded; then each instance's secret is handed to it through
//     its doorbell (package doorbell). What differs between the doors (one registration token for
//     a run, or one just-in-time runner per job) comes in as hooks.
//   - Record: the items of freshly launched instances are written in a context that survives
//     cancellation, then the launch's hangar:unrecorded tag is removed (refresh treats a tagged
//     instance without an item as an orphan).
//   - Retire: each instance's item is marked terminated by a conditional write on the state, run
//     and version the caller read; only the instances whose item is now terminated reach EC2.
//     An instance whose write lost was taken by someone else and is left alone.
//   - ToIdle and Offer: an instance goes to idle by a conditional write on the state, version and
//     run the caller read, and its doorbell is rung when its agent was serving the run; one that
//     served a run is then offered on its pool's queue, or retired when its pool may not have it
//     again (NotReusable).
//   - GiveBack: a run's instances, the whole way back: to idle, their agents' DEREGISTERED
//     awaited, offered or retired, and the run's runners deleted from GitHub.
//   - RemoveLeftovers: the stack's runners left registered on GitHub for runs their instances no
//     longer serve.
package pool
