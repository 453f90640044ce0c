package main

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSourceRefusals: the function the workflows may invoke refuses the schedule and EC2's
// events, however well formed, and the events function refuses manual refreshes; both before
// any request (the invoker here has no clients: reaching AWS would panic).
func TestSourceRefusals(t *testing.T) {
	const (
		spot       = `{"source":"aws.ec2","detail-type":"EC2 Spot Instance Interruption Warning","detail":{"instance-id":"i-0123456789abcdef0","instance-action":"terminate"}}`
		state      = `{"source":"aws.ec2","detail-type":"EC2 Instance State-change Notification","detail":{"instance-id":"i-0123456789abcdef0","state":"terminated"}}`
		sched      = `{"source":"aws.events","detail-type":"Scheduled Event","detail":{}}`
		manual     = `{"action":"refresh","dryRun":true}`
		onlyEB     = `reach refresh only from EventBridge, through the function hangar-refresh-events; this function, which the workflows may invoke, takes only {"action":"refresh"}`
		eventsOnly = `refused a manual refresh: this is the events function, invoked by EventBridge alone; invoke hangar-refresh instead`
	)
	tests := []struct {
		name    string
		events  bool
		payload string
		want    string
	}{
		{"spot warning on the workflows' function", false, spot, "refused an EC2 Spot Instance Interruption Warning: the schedule and EC2's events " + onlyEB},
		{"state change on the workflows' function", false, state, "refused an EC2 Instance State-change Notification: the schedule and EC2's events " + onlyEB},
		{"schedule on the workflows' function", false, sched, "refused a scheduled event: the schedule and EC2's events " + onlyEB},
		{"manual refresh on the events function", true, manual, eventsOnly},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := &invoker{log: slog.New(slog.DiscardHandler), stack: "hangar", events: tc.events}
			_, err := h.handle(context.Background(), []byte(tc.payload))
			require.EqualError(t, err, tc.want)
		})
	}
}

// TestSourceSetting: HANGAR_REFRESH_SOURCE takes eventbridge or nothing; anything else stops the
// function at its start, naming the variable and the value.
func TestSourceSetting(t *testing.T) {
	_, err := newInvoker(context.Background(), "hangar", "EventBridge", slog.New(slog.DiscardHandler), nil)
	require.EqualError(t, err, `HANGAR_REFRESH_SOURCE: "EventBridge": want eventbridge (the events function) or nothing (the function the workflows invoke)`)
}
