package pool

import (
	"context"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// Back is one instance on its way back to idle.
type Back struct {
	// Instance is its item as read: the write is conditional on its state and version.
	Instance state.Instance
	// Idle is the length of its idle deadline (its pool's idle timeout).
	Idle time.Duration
	// RunID is the run giving it back, which must still hold it ("" for a warm instance).
	RunID string
	// At is when the idle deadline starts (zero: now).
	At time.Time
	// Reason is the item's state reason.
	Reason string
	// Unacknowledged gives back a claim only if its agent has not acknowledged it
	// (state.Change.Unacknowledged); RegisterFailed counts a failed registration
	// (state.Change.RegisterFailed).
	Unacknowledged, RegisterFailed bool
}

// ToIdle moves one instance to idle, conditional on its state, version and run as given, with its
// pool's idle deadline, then rings its doorbell when its agent is serving the run (an
// acknowledged claim, running, or created for a label-routed job): the agent stops its runner at
// once instead of on its next read. A warm instance leaving created, or a claim its agent never
// took, has nothing to stop. It returns the item written, or the store's error as is (a
// *state.ConflictError, holding the item as someone else left it, when that write lost).
func (p *Pool) ToIdle(ctx context.Context, b Back) (*state.Instance, error) {
	w := p.ToIdleAll(ctx, []Back{b})[0]
	return w.Item, w.Err
}

// ToIdleAll is ToIdle for many instances: their writes go in one request (state.Store.TransitionAll:
// one lost condition never blocks the others), then the doorbells of those written are rung
// together. The outcomes are in the order of backs.
func (p *Pool) ToIdleAll(ctx context.Context, backs []Back) []state.Written {
	now := time.Now()
	changes := make([]state.Change, len(backs))
	befores := make([]state.Instance, len(backs))
	for i, b := range backs {
		at := b.At
		if at.IsZero() {
			at = now
		}
		in := b.Instance
		changes[i] = state.Change{InstanceID: in.ID, Pool: in.Pool, From: in.State, To: state.Idle,
			Version: in.Version, RunID: b.RunID, Unacknowledged: b.Unacknowledged, RegisterFailed: b.RegisterFailed, Marked: in.Retire != "",
			Threshold: at.Add(b.Idle), Reason: b.Reason}
		befores[i] = in
	}
	out := p.Store.TransitionAll(ctx, changes, befores)
	var bells []string
	for i, b := range backs {
		// The doorbell rung is the one the pool names, never the item's own: whoever may write
		// items could rewrite that.
		if out[i].Err == nil && out[i].Item.Bell != "" && (b.Instance.State != state.Created || b.RunID != "") && !b.Unacknowledged {
			bells = append(bells, p.Bells.URL(out[i].Item.ID))
		}
	}
	if err := p.Bells.Ring(ctx, bells...); err != nil {
		p.log().Warn("ring instances given back; their agents notice on their next read", "count", len(bells), "error", err)
	}
	return out
}

// Offer offers idle (or stopped) instances on their pools' queues, in one request. An offer
// that fails leaves them without a message: refresh offers them again, or expires them.
func (p *Pool) Offer(ctx context.Context, insts ...*state.Instance) error {
	if len(insts) == 0 {
		return nil
	}
	return p.Queues.Publish(ctx, insts...)
}

// NotReusable says why an instance that served a run may not be offered again ("" when it may):
// its item says so (state.Home, written from its pool's document at its launch and every claim:
// marked to retire, drained while it served or of a pool whose reuse is never, or no way back),
// or doc, its pool's document as the caller has it now (nil: the item alone), does.
func NotReusable(in *state.Instance, doc *pooldoc.Document) string {
	switch {
	case in.Retire != "":
		return in.Retire
	case !in.Known():
		return "its item does not say where it goes back"
	case doc != nil:
		return doc.Retire()
	}
	return ""
}

// Offered is what an OfferOrRetire did.
type Offered struct {
	// Offered are the instances handed to the offer request (Err says whether it failed).
	Offered []*state.Instance
	// Retired are the instances their pool may not have again, each retired alone.
	Retired []Retirement
	// Err is the offer request's error.
	Err error
}

// Retirement is one instance OfferOrRetire retired instead of offering.
type Retirement struct {
	Reason string
	Retired
}

// OfferOrRetire offers idle instances that served a run to their pools; those their pool may not
// have again (NotReusable, with doc, their pool's document as the caller has it now, or nil) are
// retired instead, one by one, before the others are offered in one request.
func (p *Pool) OfferOrRetire(ctx context.Context, doc *pooldoc.Document, insts []*state.Instance) Offered {
	var out Offered
	for _, in := range insts {
		why := NotReusable(in, doc)
		if why == "" {
			out.Offered = append(out.Offered, in)
			continue
		}
		out.Retired = append(out.Retired, Retirement{Reason: why, Retired: p.Retire(ctx, []state.Instance{*in}, Because(why))})
	}
	out.Err = p.Offer(ctx, out.Offered...)
	return out
}
