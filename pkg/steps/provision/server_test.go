package provision_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fake"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// TestServerNotThePools: a workflow whose GITHUB_SERVER_URL is not the GitHub server its pool
// pins (githubUrl) is refused with an error naming the input, its value and the pool's server,
// before anything changes: no GitHub call, no EC2 call, no claim, no launch. The pool's own
// server is then served, with runner URLs on it.
func TestServerNotThePools(t *testing.T) {
	t.Parallel()
	const ghe = "https://ghe.example.com"
	w := fake.NewWorld(t, fake.Pool(t, "linux", func(doc map[string]any) { doc["githubUrl"] = ghe }))
	idle := w.AddIdle(t, fake.Idle{Served: []string{fakeRepo}, LastRun: "7930"})
	for _, server := range []string{"https://github.com", "https://127.0.0.1:1", "https://ghe.example.org"} {
		cfg := fakeConfig(w, "7931", 1)
		cfg.ServerURL = server
		cfg.RegistrationTimeout = 10 * time.Second
		_, err := fakeRun(t, w, cfg)
		require.Error(t, err, server)
		require.Contains(t, err.Error(), `GITHUB_SERVER_URL: "`+server+`": pool `+w.Doc.Name+` serves the GitHub server `+ghe+` only`)
		for _, op := range []string{"RegistrationToken", "Runners", "DeleteRunner"} {
			require.Zero(t, w.GitHub.Calls(op), "%s: no GitHub call (%s)", server, op)
		}
		for _, op := range []string{"CreateFleet", "DescribeInstanceTypes", "DescribeInstances", "StartInstances", "TerminateInstances", "DeleteTags"} {
			require.Zero(t, w.EC2.Calls(op), "%s: no EC2 call (%s)", server, op)
		}
		require.Zero(t, w.SQS.Calls("ReceiveMessage"), "%s: no claim tried", server)
		held, err := w.Store.ByRun(t.Context(), "7931")
		require.NoError(t, err)
		require.Empty(t, held, "nothing claimed")
		require.Len(t, w.Store.Items(), 1, "nothing launched")
		require.Equal(t, state.Idle, w.Store.Item(idle.ID).State)
		require.Equal(t, []string{idle.ID}, w.Offered(t))
	}

	cfg := fakeConfig(w, "7932", 1)
	cfg.ServerURL = ghe + "/"
	res, err := fakeRun(t, w, cfg)
	require.NoError(t, err)
	require.Len(t, res.Instances, 1)
	require.Equal(t, ghe+"/"+fakeRepo, w.Store.Item(res.Instances[0].ID).RunnerURL, "the runner URL is on the pool's server")
	requireHeld(t, w, "7932", resultIDs(res)...)
}
