package fake

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
	"github.com/hangar-ci/hangar/pkg/pool/doorbell"
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
	// Forgetful registers like Register, but drops the first hand-over its doorbell brings for
	// each assignment (an agent that restarted after receiving it): it asks for the secret
	// again, and registers once it arrives.
	Forgetful
	// Silent writes nothing: an agent that crashed or is cut off.
	Silent
	// NoDeregister registers like Register but never deregisters: a runner that will not stop.
	NoDeregister
)

// Agent plays the instance agents' part on a Store: it watches the items and writes the signals
// and heartbeats pkg/instance/agent writes through state.Agent, each conditional on the version it acts
// on. It is not a runner: it only says what an agent would say.
type Agent struct {
	Store *Store
	// SQS holds the instances' doorbells: an assignment is registered only once its hand-over
	// (package doorbell) is there, as the agent registers only with the secret in hand. Nil: no
	// hand-over is awaited.
	SQS *SQS
	// Default is the behaviour of instances without one of their own; once instances exist, set
	// it with SetDefault.
	Default Behaviour
	// GitHub, when set, holds the runners the agents register: online once REGISTERED, offline
	// once DEREGISTERED (a runner stays registered until its release deletes it through the API).
	GitHub *GitHub

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

// SetDefault sets the behaviour of instances without one of their own.
func (a *Agent) SetDefault(b Behaviour) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.Default = b
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
		// Every change of the store, and every few milliseconds besides: a hand-over reaches a
		// doorbell without changing any item.
		for ctx.Err() == nil {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
			_ = a.Store.Wait(wctx, func(items map[string]*state.Instance) bool {
				for _, in := range items {
					a.act(in)
				}
				return false
			})
			cancel()
		}
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

// handedOver reports whether the assignment's hand-over has reached the instance's doorbell (and,
// for a Forgetful agent, whether a second one has, after it asked again); while it has not, the
// agent asks for it, once per hand-over it lacks.
func (a *Agent) handedOver(in *state.Instance, b Behaviour, now time.Time) bool {
	if a.SQS == nil {
		return true
	}
	want := 1
	if b == Forgetful {
		want = 2
	}
	got := 0
	for _, body := range a.SQS.Bodies(in.Bell) {
		var h doorbell.HandOver
		if json.Unmarshal([]byte(body), &h) == nil && h.Run == in.RunID && h.Version == in.Version && h.Secret != "" &&
			state.SecretSum(h.Secret) == in.HandOverSum {
			got++
		}
	}
	if got >= want {
		return true
	}
	// One ask for the hand-over missing (the forgotten one does not count: the agent lost it).
	if got == want-1 && a.once(in, "ask-"+strconv.Itoa(want)) {
		_ = a.Store.AgentAsk(in.ID, in.Version, 1, now)
	}
	return false
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
	case (in.State == state.Claimed || in.State == state.Created) && in.RunID != "" && in.AckVersion < in.Version && a.once(in, "ack"):
		// The agent has made its doorbell by the time it acknowledges anything (it boots first).
		if a.SQS != nil && in.Bell != "" {
			_, _ = doorbell.Own(context.Background(), a.SQS, Stack, QueueURLBase+Stack+"-"+in.Pool, in.ID, a.Store.account.ARN(in.ID))
		}
		_ = a.Store.AgentAck(in.ID, in.Version, now)
	case (in.State == state.Claimed || in.State == state.Created) && in.RunID != "" && !a.handedOver(in, b, now):
	case (in.State == state.Claimed || in.State == state.Created) && in.RunID != "" && a.once(in, "register"):
		sig := state.SignalRegistered
		if b == FailRegister {
			sig = state.SignalRegisterFailed
		} else {
			a.registered(in)
		}
		// A live agent heartbeats while it serves: its instance can be claimed again once given back.
		_, _ = a.Store.AgentHeartbeat(in.ID, now)
		_ = a.Store.AgentSignal(in.ID, state.Signal{Name: sig, Run: in.RunID, Version: in.Version, At: now,
			Log: "runner " + string(sig)})
	case in.State == state.Created && in.RunID == "" && in.Signal == "" && a.once(in, "ready"):
		_ = a.Store.AgentSignal(in.ID, state.Signal{Name: state.SignalReady, Version: in.Version, At: now})
		_, _ = a.Store.AgentHeartbeat(in.ID, now)
	case in.State == state.Idle && in.LastRunID != "" && b != NoDeregister &&
		!in.SignalFor(state.SignalDeregistered, in.LastRunID, in.Version) && in.Signal != state.SignalRegisterFailed &&
		a.once(in, "deregister"):
		a.deregistered(in.ID, in.LastRunID)
		_, _ = a.Store.AgentHeartbeat(in.ID, now)
		_ = a.Store.AgentSignal(in.ID, state.Signal{Name: state.SignalDeregistered, Run: in.LastRunID, Version: in.Version, At: now})
	}
}

// registered puts the runner in's agent configured for its run on GitHub, online (again, when it
// is there already: a runner restarted).
func (a *Agent) registered(in *state.Instance) {
	if a.GitHub == nil {
		return
	}
	name := state.RunnerNamesOf(Stack).Name(in.ID, in.RunID)
	g := a.GitHub
	g.mu.Lock()
	defer g.mu.Unlock()
	if i := g.runnerIndex(name); i >= 0 {
		g.runners[i].Status = "online"
		return
	}
	g.nextID++
	g.runners = append(g.runners, ghapi.Runner{ID: g.nextID, Name: name, Status: "online", Labels: append([]string{in.RunID}, in.Labels...)})
}

// deregistered stops the runner of run on instance id: offline, and idle.
func (a *Agent) deregistered(id, run string) {
	if a.GitHub == nil {
		return
	}
	g := a.GitHub
	g.mu.Lock()
	defer g.mu.Unlock()
	if i := g.runnerIndex(state.RunnerNamesOf(Stack).Name(id, run)); i >= 0 {
		g.runners[i].Status, g.runners[i].Busy = "offline", false
	}
}

// runnerIndex is the index of the runner named name, or -1; the caller holds g.mu.
func (g *GitHub) runnerIndex(name string) int {
	return slices.IndexFunc(g.runners, func(r ghapi.Runner) bool { return r.Name == name })
}
