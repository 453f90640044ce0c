package offers

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/state"
)

const arn = "arn:aws:ec2:us-east-1:123456789012:instance/i-0123456789abcdef0"

// deadline is fixed once, so that every goodMessage is the same.
var deadline = time.Now().Add(time.Hour).UnixMilli()

func goodMessage() Message {
	return Message{V: 1, InstanceARN: arn, InstanceID: "i-0123456789abcdef0", Pool: "p", InstanceType: "c7i.large",
		UsageClass: "spot", VCPU: 2, MemoryMiB: 4096, AZ: "us-east-1a", Version: 3, IdleDeadline: deadline}
}

func TestParseMessage(t *testing.T) {
	t.Parallel()
	body := func(mut func(*Message)) string {
		m := goodMessage()
		mut(&m)
		b, _ := json.Marshal(m)
		return string(b)
	}
	got, err := ParseMessage(body(func(*Message) {}), "p")
	require.NoError(t, err)
	require.Equal(t, goodMessage(), got)

	poison := []struct {
		name, body, want string
	}{
		{"not json", "hello", "not JSON"},
		{"empty", "", "not JSON"},
		{"array", "[1,2]", "not JSON"},
		{"future schema", body(func(m *Message) { m.V = 2 }), "schema version 2"},
		{"other pool", body(func(m *Message) { m.Pool = "q" }), `pool "q" on the queue of pool "p"`},
		{"no version", body(func(m *Message) { m.Version = 0 }), "version 0"},
		{"no deadline", body(func(m *Message) { m.IdleDeadline = 0 }), "idleDeadline 0"},
		{"no type", body(func(m *Message) { m.InstanceType = "" }), "instanceType is empty"},
		{"bad usage", body(func(m *Message) { m.UsageClass = "reserved" }), `usageClass "reserved"`},
		{"bad id", body(func(m *Message) { m.InstanceID = "x" }), `instance id "x" is malformed`},
		{"bad arn", body(func(m *Message) { m.InstanceARN = "x" }), `instance ARN "x" is malformed`},
		{"arn of another", body(func(m *Message) { m.InstanceID = "i-0123456789abcdef1" }), "names another instance"},
		{"negative vcpu", body(func(m *Message) { m.VCPU = -1 }), "vcpu -1"},
		{"negative regMs", body(func(m *Message) { m.RegisterMs = -1 }), "regMs -1"},
	}
	for _, tc := range poison {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseMessage(tc.body, "p")
			require.ErrorIs(t, err, ErrPoison)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestMessageFor(t *testing.T) {
	t.Parallel()
	in := &state.Instance{ARN: arn, ID: "i-0123456789abcdef0", Pool: "p", State: state.Stopped, Version: 4,
		Threshold: time.UnixMilli(1_800_000_000_000), Spec: state.Spec{InstanceType: "m7g.large", UsageClass: "on-demand", VCPU: 2, MemoryMiB: 8192, AZ: "b"},
		Report: state.Report{RegisterMs: 180}}
	m, err := MessageFor(in)
	require.NoError(t, err)
	require.Equal(t, int64(180), m.RegisterMs, "the agent's registration time travels with the offer")
	require.Equal(t, int64(180), m.Instance().RegisterMs, "and reaches the claim")
	require.True(t, m.Stopped)
	require.Equal(t, state.Stopped, m.State())
	require.Equal(t, int64(4), m.Version)
	require.Equal(t, int64(1_800_000_000_000), m.IdleDeadline)
	b, _ := json.Marshal(m)
	require.Less(t, len(b), 1024, "a message stays under 1 KiB")

	in.State = state.Running
	_, err = MessageFor(in)
	require.ErrorContains(t, err, "is running")
	in.State, in.RunID = state.Idle, "5"
	_, err = MessageFor(in)
	require.ErrorContains(t, err, "still holds run 5")
}

func TestRequestValidate(t *testing.T) {
	t.Parallel()
	ok := Request{Count: 2, UsageClass: "spot", InstanceTypes: []string{"c*"}, Assign: state.Assignment{RunID: "9", Repo: "octo/app"}, ClaimDeadline: time.Now()}
	require.NoError(t, ok.Validate())
	tests := []struct {
		name string
		mut  func(*Request)
		want string
	}{
		{"zero count", func(r *Request) { r.Count = 0 }, "count 0: want 1 to 100"},
		{"negative count", func(r *Request) { r.Count = -3 }, "count -3"},
		{"too many", func(r *Request) { r.Count = 101 }, "count 101"},
		{"usage", func(r *Request) { r.UsageClass = "Spot" }, `usage class "Spot"`},
		{"pattern", func(r *Request) { r.InstanceTypes = []string{"c[5-7]*"} }, `instance type pattern "c[5-7]*" is malformed`},
		{"upper pattern", func(r *Request) { r.InstanceTypes = []string{"C7i.large"} }, `"C7i.large"`},
		{"vcpu", func(r *Request) { r.MinVCPU = -1 }, "minimum vCPU -1"},
		{"memory", func(r *Request) { r.MinMemoryMiB = -5 }, "minimum memory -5 MiB"},
		{"run", func(r *Request) { r.Assign.RunID = "run-1" }, `run id "run-1" is malformed`},
		{"deadline", func(r *Request) { r.ClaimDeadline = time.Time{} }, "claim deadline"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := ok
			tc.mut(&r)
			require.ErrorContains(t, r.Validate(), tc.want)
		})
	}
}

func TestFits(t *testing.T) {
	t.Parallel()
	m := goodMessage() // c7i.large, spot, 2 vCPU, 4096 MiB
	tests := []struct {
		name string
		req  Request
		want bool
	}{
		{"anything", Request{}, true},
		{"spot", Request{UsageClass: "spot"}, true},
		{"on-demand", Request{UsageClass: "on-demand"}, false},
		{"family glob", Request{InstanceTypes: []string{"c*"}}, true},
		{"exact", Request{InstanceTypes: []string{"c7i.large"}}, true},
		{"size glob", Request{InstanceTypes: []string{"c7?.*"}}, true},
		{"other family", Request{InstanceTypes: []string{"m*"}}, false},
		{"any of several", Request{InstanceTypes: []string{"m7g.*", "c7i.*"}}, true},
		{"prefix is not a glob", Request{InstanceTypes: []string{"c7"}}, false},
		{"vcpu ok", Request{MinVCPU: 2}, true},
		{"vcpu short", Request{MinVCPU: 4}, false},
		{"memory ok", Request{MinMemoryMiB: 4096}, true},
		{"memory short", Request{MinMemoryMiB: 4097}, false},
		{"all", Request{UsageClass: "spot", InstanceTypes: []string{"c*"}, MinVCPU: 1, MinMemoryMiB: 1024}, true},
		{"excluded", Request{Exclude: []string{"i-0123456789abcdef0"}}, false},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, tc.req.Fits(m), tc.name)
	}
}
