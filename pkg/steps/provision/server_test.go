package provision_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
	"github.com/hangar-ci/hangar/pkg/steps/provision"
)

// callCounter counts every call provision makes to GitHub.
type callCounter struct {
	provision.GitHub
	calls atomic.Int64
}

func (c *callCounter) RegistrationToken(ctx context.Context) (ghapi.Token, error) {
	c.calls.Add(1)
	return c.GitHub.RegistrationToken(ctx)
}

func (c *callCounter) Runners(ctx context.Context) ([]ghapi.Runner, error) {
	c.calls.Add(1)
	return c.GitHub.Runners(ctx)
}

func (c *callCounter) DeleteRunner(ctx context.Context, id int64) error {
	c.calls.Add(1)
	return c.GitHub.DeleteRunner(ctx, id)
}

// TestServerNotThePools: a workflow whose GITHUB_SERVER_URL is not the GitHub server its pool
// pins (githubUrl) is refused with an error naming the input, its value and the pool's server,
// before anything changes: no GitHub call, no EC2 call, no claim, no launch. The pool's
// own server is then served, with runner URLs on it.
func TestServerNotThePools(t *testing.T) {
	t.Parallel()
	e := newEnv(t, localenv.Options{})
	for _, server := range []string{"https://ghe.example.com", "http://127.0.0.1:1", "https://github.com"} {
		cfg := e.config("7931", 1)
		cfg.ServerURL = server
		cfg.RegistrationTimeout = 10 * time.Second
		deps, err := e.w.Provision(e.ctx, cfg.Pool)
		require.NoError(t, err)
		counter := &callCounter{GitHub: deps.GitHub}
		deps.GitHub = counter
		_, err = provision.Run(e.ctx, cfg, deps)
		require.Error(t, err, server)
		require.Contains(t, err.Error(), `GITHUB_SERVER_URL: "`+server+`": pool `+e.Pool+` serves the GitHub server `+e.GH.URL()+` only`)
		require.Zero(t, counter.calls.Load(), "no GitHub call")
		require.Zero(t, e.ec2.Total(), "no EC2 call")
		held, err := e.Store.ByRun(e.ctx, "7931")
		require.NoError(t, err)
		require.Empty(t, held, "nothing claimed")
		require.Empty(t, e.liveInstances(), "nothing launched")
	}

	res, err := e.provision(e.config("7932", 1))
	require.NoError(t, err)
	require.Len(t, res.Instances, 1)
	in, err := e.Store.Get(e.ctx, res.Instances[0].ID)
	require.NoError(t, err)
	require.Equal(t, e.GH.URL()+"/"+localenv.Repo, in.RunnerURL, "the runner URL is on the pool's server")
	e.release("7932")
}
