package badinput

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/awsproxy"
)

// eventCase is an invocation payload the refresh function refuses.
type eventCase struct {
	name    string
	payload string
	want    []string // in the function's error message
}

// wantEvent is what every refusal of an unrecognised event lists as accepted.
const wantEvent = `want a scheduled event, an EC2 spot interruption warning or state-change notification, or {"action":"refresh"}`

// eventCases are the Lambda-event cases. The state-change case names one of the pool's idle
// instances: refused, it must leave it alone.
func eventCases(w *world) []eventCase {
	idle := slices.Sorted(maps.Keys(w.idle))[0]
	return []eventCase{
		{"not JSON", `refresh everything now`, []string{"malformed event: invalid character", wantEvent}},
		{"a JSON list", `[{"action":"refresh"}]`, []string{"malformed event: json: cannot unmarshal array", wantEvent}},
		{"null", `null`, []string{`unrecognised event (source "", detail-type "", action "")`, wantEvent}},
		{"unknown action", `{"action":"terminate-all"}`, []string{`unrecognised event (source "", detail-type "", action "terminate-all")`, wantEvent}},
		{"scheduled event from another source", `{"source":"my.app","detail-type":"Scheduled Event"}`,
			[]string{`unrecognised event (source "my.app", detail-type "Scheduled Event"`, wantEvent}},
		{"dry run not a boolean", `{"action":"refresh","dryRun":"yes"}`,
			[]string{"malformed event", "dryRun", "of type bool", wantEvent}},
		{"pools not a list", `{"action":"refresh","pools":"` + w.Pool + `"}`,
			[]string{"malformed event", "pools", "of type []string", wantEvent}},
		{"pool name malformed", `{"action":"refresh","pools":["../../etc/passwd"]}`,
			[]string{`malformed manual refresh: pools: pool name "../../etc/passwd" is malformed: want 1 to 48 of a-z, 0-9 and '-'`}},
		{"pool unknown", `{"action":"refresh","dryRun":true,"pools":["gpu-x64"]}`,
			[]string{fmt.Sprintf(`pools: "gpu-x64" is not a pool of stack %s (its pools: %s)`, w.Stack, w.Pool)}},
		{"spot warning without an instance", `{"source":"aws.ec2","detail-type":"EC2 Spot Instance Interruption Warning","detail":{}}`,
			[]string{"malformed EC2 Spot Instance Interruption Warning: detail.instance-id is missing"}},
		{"spot warning with a malformed instance id", `{"source":"aws.ec2","detail-type":"EC2 Spot Instance Interruption Warning","detail":{"instance-id":"i-*"}}`,
			[]string{`malformed EC2 Spot Instance Interruption Warning: instance id "i-*" is malformed: want i- followed by 8 to 17 lowercase hex digits`}},
		{"spot warning with a detail that is not an object", `{"source":"aws.ec2","detail-type":"EC2 Spot Instance Interruption Warning","detail":"` + idle + `"}`,
			[]string{"malformed EC2 Spot Instance Interruption Warning: detail.instance-id is missing"}},
		{"state change to an unknown state", `{"source":"aws.ec2","detail-type":"EC2 Instance State-change Notification","detail":{"instance-id":"` + idle + `","state":"exploded"}}`,
			[]string{`malformed EC2 Instance State-change Notification: detail.state "exploded": want one of pending, running, stopping, stopped, shutting-down, terminated`}},
	}
}

// eventRun hands the refresh function a bad event and checks its refusal: an error naming the
// field and what it accepts, no mutating AWS call, the pool untouched.
func (w *world) eventRun(c eventCase) func(t *testing.T) {
	return func(t *testing.T) {
		w.counts()
		res, err := w.fn.Invoke(w.ctx, []byte(c.payload))
		require.NoError(t, err)
		ops := w.counts()
		var fnErr struct {
			ErrorMessage string `json:"errorMessage"`
		}
		require.True(t, res.Error, "the function accepted %s: %s", c.payload, res.Payload)
		require.NoError(t, json.Unmarshal(res.Payload, &fnErr), "%s", res.Payload)
		t.Logf("AWS %v: %s", ops, fnErr.ErrorMessage)
		for _, x := range c.want {
			require.Contains(t, fnErr.ErrorMessage, x)
		}
		require.Empty(t, awsproxy.MutatingOps(ops), "mutating AWS calls for a bad event")
		w.untouched(t)
	}
}
