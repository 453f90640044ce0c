package fake

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/hangar-ci/hangar/pkg/state"
)

// Behaviour is how an Agent answers for one instance.
type Behaviour int

// Behaviours.
const (
	// Register acknowledges a claim, registers the runner (REGISTERED), deregisters it when the
	// run gives the instance back (DEREGISTERED), and says READY when booted for a warm pool.
	Register Behaviour = iota
	// FailRegister acknowledges a claim but fails the registration (REGISTER_FAILED).
	FailRegister
	// Silent writes nothing: an agent that crashed or is cut off.
	Silent
	// NoDeregister registers like Register but never deregisters: a runner that will not stop.
	NoDeregister
)

// Agent plays the instance agents' part on a Store: it watches the items and writes the signals
// and heartbeats pkg/agent writes through state.Agent, each conditional on the version it acts
// on. It is not a runner: it only says what an agent would say.
type Agent struct {
	Store *Store
	// Default is the behaviour of instances without one of their own.
	Default Behaviour

	mu    sync.Mutex
	by    map[string]Behaviour
	done  map[string]bool // "<id>/<version>/<what>" already written
	stop  context.CancelFunc
	ended chan struct{}
}

// Behave sets instance id's behaviour.
func (a *Agent) Behave(id string, b Behaviour) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.by == nil {
		a.by = map[string]Behaviour{}
	}
	a.by[id] = b
}

func (a *Agent) behaviour(id string) Behaviour {
	a.mu.Lock()
	defer a.mu.Unlock()
	if b, ok := a.by[id]; ok {
		return b
	}
	return a.Default
}

// Start watches the store until Stop (or ctx ends).
func (a *Agent) Start(ctx context.Context) {
	ctx, a.stop = context.WithCancel(ctx)
	a.ended = make(chan struct{})
	go func() {
		defer close(a.ended)
		_ = a.Store.Wait(ctx, func(items map[string]*state.Instance) bool {
			for _, in := range items {
				a.act(in)
			}
			return false
		})
	}()
}

// Stop stops watching and waits for the watcher to end.
func (a *Agent) Stop() {
	if a.stop != nil {
		a.stop()
		<-a.ended
	}
}

// once reports whether what has not been done yet for the item's version, and marks it done.
func (a *Agent) once(in *state.Instance, what string) bool {
	key := in.ID + "/" + strconv.FormatInt(in.Version, 10) + "/" + what
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done == nil {
		a.done = map[string]bool{}
	}
	if a.done[key] {
		return false
	}
	a.done[key] = true
	return true
}

// act writes what an agent would write on seeing in. Writes that lose to a newer version are
// dropped, as the agent drops them.
func (a *Agent) act(in *state.Instance) {
	b := a.behaviour(in.ID)
	if b == Silent {
		return
	}
	now := time.Now()
	switch {
	case in.State == state.Claimed && in.RunID != "" && in.AckVersion < in.Version && a.once(in, "ack"):
		_ = a.Store.AgentAck(in.ID, in.Version, now)
	case (in.State == state.Claimed || in.State == state.Created) && in.RunID != "" && a.once(in, "register"):
		sig := state.SignalRegistered
		if b == FailRegister {
			sig = state.SignalRegisterFailed
		}
		_ = a.Store.AgentSignal(in.ID, state.Signal{Name: sig, Run: in.RunID, Version: in.Version, At: now,
			Log: "runner " + string(sig)})
	case in.State == state.Created && in.RunID == "" && in.Signal == "" && a.once(in, "ready"):
		_ = a.Store.AgentSignal(in.ID, state.Signal{Name: state.SignalReady, Version: in.Version, At: now})
		_, _ = a.Store.AgentHeartbeat(in.ID, now)
	case in.State == state.Idle && in.LastRunID != "" && b != NoDeregister &&
		!in.SignalFor(state.SignalDeregistered, in.LastRunID, in.Version) && in.Signal != state.SignalRegisterFailed &&
		a.once(in, "deregister"):
		_ = a.Store.AgentSignal(in.ID, state.Signal{Name: state.SignalDeregistered, Run: in.LastRunID, Version: in.Version, At: now})
		_, _ = a.Store.AgentHeartbeat(in.ID, now)
	}
}
