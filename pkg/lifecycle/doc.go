// Package lifecycle owns the two moments of an instance's life that touch both its item and EC2,
// so that provision, release and refresh do them one way:
//
//   - Record: the items of freshly launched instances are written in a context that survives
//     cancellation, then the launch's hangar:unrecorded tag is removed (refresh treats a tagged
//     instance without an item as an orphan).
//   - Retire: each instance's item is marked terminated by a conditional write on the state, run
//     and version the caller read; only the instances whose item is now terminated reach EC2,
//     in one TerminateInstances request, then one by one if that fails, an instance already gone
//     being fine. An instance whose write lost was taken by someone else (a claim by another
//     run, say) and is left alone.
package lifecycle
