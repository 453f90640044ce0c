// Package release is the release step: it gives a workflow run's instances back to the pool
// (pool.GiveBack). Running (or still claimed) instances go to idle with the run cleared; their
// agents stop the runners, forget the registrations, wipe, and signal DEREGISTERED; each is then
// offered to its pool again. Instances that do not deregister in time, and instances still
// booting for the run, are terminated. Finally the run's runners are deleted through the GitHub
// API, with the workflow's credential: no instance is ever handed a token that could remove a
// runner. Before it starts, release deletes the stack's runners other runs left behind in the
// scope (pool.RemoveLeftovers), as provision does.
//
// Release is idempotent and tolerant: twice is harmless, instances already gone are skipped, and
// a cleanup problem is reported as a warning, not an error.
package release
