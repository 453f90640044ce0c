// Package release gives a workflow run's instances back: running (or still claimed) instances go
// to idle with the run cleared and a fresh runner remove token on the item; their agents stop and
// deregister the runners, wipe, and signal DEREGISTERED; each is then offered to its pool again.
// Instances that do not deregister in time, and instances still booting for the run, are
// terminated. Finally no runner carrying the run's label may remain on GitHub.
//
// Release is idempotent and tolerant: twice is harmless, instances already gone are skipped, and
// a cleanup problem is reported as a warning, not an error. Provision uses GiveBack to undo a
// provision that fails.
package release
