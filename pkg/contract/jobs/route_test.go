package jobs_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/jobs"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
)

func pool(name string, labels ...string) *pooldoc.Document {
	return &pooldoc.Document{Name: name, Jobs: &pooldoc.Jobs{StackLabel: "hangar", Labels: labels}}
}

// TestRoute: the rules of docs/labels.md, "Labels and routing": the stack label is required;
// self-hosted and the stack label name no pool; an exact label set wins; otherwise the pool with
// the fewest labels that has them all; a tie is ambiguous; nothing is unknown.
func TestRoute(t *testing.T) {
	t.Parallel()
	router, err := jobs.NewRouter([]*pooldoc.Document{
		pool("small", "linux-x64"),
		pool("large", "linux-x64", "large"),
		pool("gpu-a", "linux", "gpu", "a100"),
		pool("gpu-h", "linux", "gpu", "h100"),
		{Name: "steps-only"},
	})
	require.NoError(t, err)
	tests := []struct {
		name   string
		labels []string
		pool   string
		reason string // a RouteError's reason; "" with pool "": ErrNotOurs
	}{
		{"exact", []string{"self-hosted", "hangar", "linux-x64"}, "small", ""},
		{"case does not matter", []string{"Self-Hosted", "HANGAR", "Linux-X64"}, "small", ""},
		{"without self-hosted", []string{"hangar", "linux-x64"}, "small", ""},
		{"exact beats a superset", []string{"hangar", "linux-x64", "large"}, "large", ""},
		{"most specific", []string{"hangar", "large"}, "large", ""},
		{"fewest labels wins", []string{"hangar", "linux-x64"}, "small", ""},
		{"repeated labels", []string{"hangar", "large", "LARGE"}, "large", ""},
		{"ambiguous", []string{"hangar", "gpu"}, "", jobs.ReasonAmbiguous},
		{"ambiguous too", []string{"hangar", "linux", "gpu"}, "", jobs.ReasonAmbiguous},
		{"one of two", []string{"hangar", "gpu", "h100"}, "gpu-h", ""},
		{"unknown label", []string{"hangar", "linux-x64", "arm64"}, "", jobs.ReasonUnknown},
		{"only the stack label", []string{"self-hosted", "hangar"}, "", jobs.ReasonUnknown},
		{"not ours", []string{"self-hosted", "linux-x64"}, "", ""},
		{"no labels", nil, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := router.Route(tc.labels)
			switch {
			case tc.pool != "":
				require.NoError(t, err)
				require.Equal(t, tc.pool, got.Name)
			case tc.reason != "":
				var re *jobs.RouteError
				require.ErrorAs(t, err, &re)
				require.Equal(t, tc.reason, re.Reason)
				require.Nil(t, got)
			default:
				require.ErrorIs(t, err, jobs.ErrNotOurs)
				require.False(t, router.Ours(tc.labels))
			}
		})
	}
}

// TestNewRouterRefuses: pools that no job could tell apart, or that disagree on the stack label.
func TestNewRouterRefuses(t *testing.T) {
	t.Parallel()
	_, err := jobs.NewRouter([]*pooldoc.Document{pool("a", "x", "y"), pool("b", "Y", "X")})
	require.ErrorContains(t, err, "pools a and b have the same labels")
	other := pool("c", "z")
	other.Jobs.StackLabel = "other"
	_, err = jobs.NewRouter([]*pooldoc.Document{pool("a", "x"), other})
	require.ErrorContains(t, err, `stack label "other"`)
	r, err := jobs.NewRouter([]*pooldoc.Document{{Name: "steps"}})
	require.NoError(t, err)
	require.False(t, r.Serves())
	_, err = r.Route([]string{"hangar", "x"})
	require.True(t, errors.Is(err, jobs.ErrNotOurs), "a stack without label-routed pools takes no job")
}

// TestMessages: what the webhook writes, the dispatcher reads back; anything else is refused with
// what is wrong.
func TestMessages(t *testing.T) {
	t.Parallel()
	m := jobs.Message{Kind: jobs.KindQueued, Job: jobs.Job{ID: 7, RunID: 42, Repo: "octo/app", Labels: []string{"hangar", "x"}, Pool: "linux", Installation: 9}}
	body, err := m.Encode()
	require.NoError(t, err)
	back, err := jobs.Parse(body)
	require.NoError(t, err)
	m.V = jobs.Version
	require.Equal(t, m, back)
	require.Equal(t, "j7", back.Job.Key())
	back.Job.Redispatch = 2
	require.Equal(t, "j7r2", back.Job.Key())

	for body, want := range map[string]string{
		`not json`:                         "not JSON",
		`{"v":2,"kind":"queued","job":{}}`: "version 2",
		`{"v":1,"kind":"queued","job":{"id":1,"repo":"octo/app","installation":1}}`:                                                     "pool name",
		`{"v":1,"kind":"nope","job":{}}`:                                                                                                "unknown kind",
		`{"v":1,"kind":"queued","job":{"id":1,"repo":"x","installation":1,"pool":"p"}}`:                                                 "repository",
		`{"v":1,"kind":"check","job":{"id":1,"repo":"o/r","installation":1},"instanceId":"i-0123456789abcdef0","key":"42","version":1}`: "want the job key",
		`{"v":1,"kind":"queued","job":{"id":1},"extra":1}`:                                                                              "unknown field",
	} {
		_, err := jobs.Parse(body)
		require.ErrorContains(t, err, want, body)
	}

	r := jobs.Return{InstanceID: "i-0123456789abcdef0", Key: "j7", Version: 3, Lost: true}
	body, err = r.Encode()
	require.NoError(t, err)
	rb, err := jobs.ParseReturn(body)
	require.NoError(t, err)
	r.V = jobs.Version
	require.Equal(t, r, rb)
	_, err = jobs.ParseReturn(`{"v":1,"instanceId":"i-0123456789abcdef0","key":"42","version":3}`)
	require.ErrorContains(t, err, "want a job key")
}
