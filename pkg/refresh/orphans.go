package refresh

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
)

// bellSweepEvery is how often one refresh (holding a lease) sweeps doorbells left without a live
// instance. Every path that ends an instance deletes its doorbell; the sweep only catches what a
// crash left, and reads every doorbell's item, so it runs rarely.
const bellSweepEvery = time.Hour

// sweepBells deletes, at most once per bellSweepEvery across refreshes, the stack's doorbells
// whose instance has no live item.
func (r *run) sweepBells(ctx context.Context) {
	if r.cfg.DryRun || !r.d.Pool.Bells.On() {
		return
	}
	held, err := r.d.Store.Lease(ctx, "doorbell-sweep", r.holder, bellSweepEvery)
	if err != nil || !held {
		if err != nil {
			r.fail("take the doorbell sweep's lease: %v", err)
		}
		return
	}
	n, err := r.d.Pool.Bells.Sweep(ctx, func(ctx context.Context, ids []string) (map[string]bool, error) {
		items, err := r.d.Store.GetMany(ctx, ids)
		live := map[string]bool{}
		for id, it := range items {
			live[id] = it.State != state.Terminated
		}
		if errors.Is(err, state.ErrBadItem) {
			err = nil // a malformed item's doorbell goes: its agent polls instead
		}
		return live, err
	})
	if err != nil {
		r.fail("sweep doorbells: %v", err)
	}
	if n > 0 {
		r.d.Log.Info("deleted doorbells of instances no longer live", "count", n)
	}
}

// orphans terminates the stack's instances that still carry the unrecorded tag past the grace and
// have no item; those that do have one (the untagging failed) are untagged.
func (r *run) orphans(ctx context.Context) {
	defer r.sweepBells(ctx)
	now := r.d.Now()
	p := ec2.NewDescribeInstancesPaginator(r.d.Pool.EC2, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
		{Name: aws.String("tag:" + fleet.TagStack), Values: []string{r.cfg.Stack}},
		{Name: aws.String("tag-key"), Values: []string{fleet.TagUnrecorded}},
		{Name: aws.String("instance-state-name"), Values: []string{"pending", "running", "stopping", "stopped"}},
	}})
	var ids []string
	pools := map[string]string{}
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			r.fail("look for orphans: %v", err)
			return
		}
		for _, res := range page.Reservations {
			for _, in := range res.Instances {
				if in.LaunchTime != nil && now.Sub(*in.LaunchTime) < r.cfg.OrphanGrace {
					continue // provision may be writing its item right now
				}
				id := aws.ToString(in.InstanceId)
				ids = append(ids, id)
				for _, t := range in.Tags {
					if aws.ToString(t.Key) == fleet.TagPool {
						pools[id] = aws.ToString(t.Value)
					}
				}
			}
		}
	}
	if len(ids) == 0 {
		return
	}
	items, err := r.d.Store.GetMany(ctx, ids)
	if err != nil {
		r.fail("look up possible orphans: %v", err)
		return
	}
	var orphans, recorded []string
	for _, id := range ids {
		if _, ok := items[id]; ok {
			recorded = append(recorded, id)
			r.act(Action{Instance: id, Pool: pools[id], Do: "untag", Reason: "it has an item; the tag was left behind"})
		} else {
			orphans = append(orphans, id)
			r.act(Action{Instance: id, Pool: pools[id], Do: "terminate",
				Reason: "orphan: launched more than " + r.cfg.OrphanGrace.String() + " ago and never recorded"})
		}
	}
	r.mu.Lock()
	r.report.Orphans = len(orphans)
	r.mu.Unlock()
	if r.cfg.DryRun {
		return
	}
	if err := fleet.MarkRecorded(ctx, r.d.Pool.EC2, recorded); err != nil {
		r.fail("%v", err)
	}
	if err := r.d.Pool.Terminate(ctx, orphans); err != nil {
		r.fail("terminate orphans: %v", err)
	}
}
