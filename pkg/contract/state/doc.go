// Package state is Hangar's DynamoDB state store: one item per EC2 instance, moved between states
// only by conditional writes that name the expected state, run and version (docs/design.md §2–3).
//
// The control plane (provision, release, refresh) uses Store. The instance agent uses Agent, which
// can write nothing but the agent's own attributes (signals and heartbeats) on its own item.
// Finding a run's instances and a pool's instances in a state (expired or not) are index Queries,
// never Scans; see Store.ByRun, Store.InPoolState and Store.Expired.
package state
