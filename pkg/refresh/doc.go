// Package refresh is the control plane's always-on part, run by a scheduled Lambda (and by hand):
// per pool it terminates instances past their deadline in every state, terminates failed,
// interrupted, outdated and vanished (ghost) instances among those it reads, promotes warm
// instances whose agents are READY, keeps the warm pool at its scheduled size (launching what is
// missing in one CreateFleet, stopping instances for the stopped part, trimming the excess of
// warm instances that never served a run), and per stack terminates orphans: launched instances
// that never got an item. It also handles EC2 spot interruption and state-change events.
//
// It reads only what it acts on: expired items through the index's deadline condition, and each
// pool's idle, stopped and created items. Every change is a conditional write, so two refreshes
// at once do no harm; a failing pool does not stop the others.
package refresh
