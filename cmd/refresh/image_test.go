package main_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/lambdaemu"
	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/contract/state"
	"github.com/hangar-ci/hangar/pkg/pool/fleet"
)

// TestBrokenImageIsNotReplacedInALoop: a pool whose image lacks git (the simulator covers it)
// keeps one instance warm. Its first instance's agent fails init once, naming git; the next
// refresh retires it and launches none in its place, nor does any refresh after it, each
// saying why.
func TestBrokenImageIsNotReplacedInALoop(t *testing.T) {
	t.Parallel()
	testbed.Require(t)
	bootstrap := buildBootstrap(t)
	startCtx, cancelStart := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancelStart()
	e, err := localenv.Start(startCtx, localenv.Options{Stack: testbed.Name(t, "image"), Baked: true, Hide: []string{"/usr/bin/git"}})
	require.NoError(t, err)
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	require.NoError(t, e.UpdatePool(ctx, func(d *pooldoc.Document) {
		d.Warm = pooldoc.Warm{Schedules: []pooldoc.Schedule{{Name: "default", Hot: 1}}}
	}))
	fn, err := lambdaemu.Start(lambdaemu.Function{Name: pooldoc.RefreshEventsFunction(e.Stack), Bootstrap: bootstrap,
		Env: append(os.Environ(), "HANGAR_STACK="+e.Stack, pooldoc.RefreshSourceEnv+"="+pooldoc.RefreshSourceEventBridge)})
	require.NoError(t, err)
	defer fn.Close()
	scheduled := `{"version":"0","id":"1","detail-type":"Scheduled Event","source":"aws.events","account":"123456789012","time":"2026-11-22T00:00:00Z","region":"us-east-1","resources":[],"detail":{}}`
	refresh := func() string {
		res := invoke(t, fn, scheduled)
		require.False(t, res.Error, "%s\n%s", res.Payload, fn.Logs())
		return string(res.Payload)
	}

	refresh()
	warm, err := e.Store.InPoolState(ctx, e.Pool, state.Created)
	require.NoError(t, err)
	require.Len(t, warm, 1, "the warm pool's instance is launched")
	id := warm[0].ID
	var failed *state.Instance
	require.NoError(t, localenv.Eventually(ctx, 3*time.Minute, "the agent fails init", func(ctx context.Context) (bool, error) {
		failed, err = e.Store.Get(ctx, id)
		return err == nil && failed.Signal == state.SignalFailed, err
	}))
	require.Contains(t, failed.SignalLog, state.ImageContractFailure)
	require.Contains(t, failed.SignalLog, "git: actions/checkout")

	for range 3 {
		report := refresh()
		var rep struct {
			Pools []struct {
				Errors []string `json:"errors"`
			} `json:"pools"`
		}
		require.NoError(t, json.Unmarshal([]byte(report), &rep), report)
		require.Len(t, rep.Pools, 1)
		require.Contains(t, rep.Pools[0].Errors[len(rep.Pools[0].Errors)-1], "its image lacks what Hangar needs", report)
	}
	it, err := e.Store.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, state.Terminated, it.State, "the failed instance is retired")
	c, err := e.Store.Census(ctx, e.Pool)
	require.NoError(t, err)
	require.Zero(t, c.Live(), "nothing launched in its place: the image would fail the same way")
	out, err := e.EC2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
		{Name: aws.String("tag:" + fleet.TagStack), Values: []string{e.Stack}}, {Name: aws.String("tag:" + fleet.TagPool), Values: []string{e.Pool}}}})
	require.NoError(t, err)
	launched := 0
	for _, r := range out.Reservations {
		launched += len(r.Instances)
	}
	require.Equal(t, 1, launched, "one instance in all, through four refreshes")
}
