package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/contract/state"
)

// labelRouted shows the second way in: three jobs saying runs-on: [self-hosted, hangar,
// linux-x64] and nothing else, served by the warm pool's instances (and one created), each wiped
// after its job and back in the pool.
func labelRouted(ctx context.Context, e *localenv.Env, jobs *localenv.Jobs, tl *timeline) error {
	labels := []string{"self-hosted", "hangar", "linux-x64"}
	say("label-routed jobs: three jobs with runs-on: [%s] and no provision or release step; the GitHub App's webhooks bring them", strings.Join(labels, ", "))
	idle, err := e.Store.InPoolState(ctx, e.Pool, state.Idle)
	if err != nil {
		return err
	}
	fmt.Printf("    the pool has %d warm instances; a job that finds none gets one created\n", len(idle))
	start := time.Now()
	var ids []int64
	for i := range 3 {
		ids = append(ids, jobs.QueueJob(localenv.Repo, int64(4100+i), labels, "echo job $GITHUB_RUN_ID on $RUNNER_NAME; ls -A ~ | wc -l"))
	}
	served := map[string]bool{}
	for _, id := range ids {
		j, err := e.GH.WaitJob(ctx, id)
		if err != nil {
			return err
		}
		instance, key, _ := e.RunnerNames().Parse(j.RunnerName)
		reused := "created for it"
		for _, it := range idle {
			if it.ID == instance {
				reused = "warm"
			}
		}
		fmt.Printf("    job %d: %s on a just-in-time runner made for it (%s, key %s) on %s, %s\n", j.ID, j.Conclusion, j.RunnerName, key, instance, reused)
		served[instance] = true
	}
	tl.add("3 label-routed jobs", start, fmt.Sprintf("%d instances, webhook to done", len(served)))

	say("each instance's agent wiped it after its one job and returned it; the dispatcher offers it again")
	start = time.Now()
	var back []state.Instance
	if err := localenv.Eventually(ctx, 2*time.Minute, "the jobs' instances idle and wiped", func(ctx context.Context) (bool, error) {
		back, err = e.Store.InPoolState(ctx, e.Pool, state.Idle)
		if err != nil {
			return false, err
		}
		n := 0
		for _, it := range back {
			if served[it.ID] && it.Signal == state.SignalDeregistered && names.IsJobKey(it.LastRunID) {
				n++
			}
		}
		return n == len(served), nil
	}); err != nil {
		return err
	}
	for _, it := range back {
		if served[it.ID] {
			fmt.Printf("    %s idle until %s, last served %s, wiped (%s)\n", it.ID, it.Threshold.Format(time.RFC3339), names.Describe(it.LastRunID), it.Signal)
		}
	}
	tl.add("label-routed: instances wiped and back", start, fmt.Sprintf("%d idle, %d runners left on GitHub", len(served), len(e.GH.Runners(""))))
	return nil
}
