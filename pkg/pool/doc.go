// Package lifecycle owns the moments of an instance's life that touch its item and EC2 or its
// pool, so that provision, release and refresh do them one way:
//
//   - Record: the items of freshly launched instances are written in a context that survives
//     cancellation, then the launch's hangar:unrecorded tag is removed (refresh treats a tagged
//     instance without an item as an orphan).
//   - Retire: each instance's item is marked terminated by a conditional write on the state, run
//     and version the caller read; only the instances whose item is now terminated reach EC2,
//     in one TerminateInstances request, then one by one if that fails, an instance already gone
//     being fine. An instance whose write lost was taken by someone else (a claim by another
//     run, say) and is left alone.
//   - Give back (Returner): an instance goes to idle by a conditional write on the state,
//     version and run the caller read, with its pool's idle deadline, and its doorbell is rung
//     when its agent was serving the run. An instance that served a run is then offered on its
//     pool's queue, unless its pool's reuse is never or its pool document cannot be read
//     (NotReusable): then it is retired instead. A write that loses leaves the instance alone. When
//     to give back (release waits for DEREGISTERED first; provision counts a failed
//     registration) is the caller's.
package pool
