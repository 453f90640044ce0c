package fake

import (
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// Heartbeat writes a heartbeat now for every live instance whose agent is not Silent, as live
// agents do every few seconds (state.Agent.Heartbeat). The Agent writes one only with its READY
// and its DEREGISTERED, just after the signal: an instance created for a run has none while it
// serves the run, and none in the moment after its release's DEREGISTERED, when a claim of it
// would lose for want of a fresh heartbeat (state.HeartbeatFresh). A test that will claim again
// an instance a provision created calls Heartbeat once its agent has registered.
func (w *World) Heartbeat() {
	now := time.Now()
	for id, in := range w.Store.Items() {
		if in.State == state.Terminated || w.Agent.behaviour(id) == Silent {
			continue
		}
		_, _ = w.Store.AgentHeartbeat(id, now)
	}
}
