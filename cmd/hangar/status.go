package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hangar-ci/hangar/pkg/operator"
)

func newStatus(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status [POOL...]",
		Short: "what every pool holds now: instances by state, offers, dead letters, warm target, rollout",
		Long: `status shows, per pool (every pool of the stack, or those named): its instances by state
(idle, warming: warm ones being created, booting: created for a run, claimed, running, stopped),
the offers in its queue and those a claimer holds, the messages of its dead-letter queue, the
warm target in force now, and how many live instances run its current launch spec (an image or
type change rolls out as that count reaches all of them). With label-routed jobs, it also shows
the stack's jobs queue: messages waiting, those the dispatcher holds, and its dead letters (jobs
the dispatcher gave up on). With --output json: {"pools": [...], "jobs": {...} or null}.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, pools []string) error {
			in, err := open(cmd.Context(), g)
			if err != nil {
				return err
			}
			st, err := in.Status(cmd.Context(), pools...)
			if err != nil {
				return err
			}
			jobs, jobsErr := in.Jobs(cmd.Context())
			if g.output == outputJSON {
				if err := writeJSON(cmd.OutOrStdout(), map[string]any{"pools": st, "jobs": jobs}); err != nil {
					return err
				}
			} else if err := statusTable(cmd, st, jobs); err != nil {
				return err
			}
			if jobsErr != nil {
				return fmt.Errorf("the jobs queue could not be read: %w", jobsErr)
			}
			return nil
		},
	}
}

func statusTable(cmd *cobra.Command, st []operator.PoolStatus, jobs *operator.JobsStatus) error {
	rows := make([][]string, len(st))
	var problems []string
	for k, p := range st {
		target := "none"
		if p.Target.Schedule != "" {
			target = fmt.Sprintf("%d hot, %d stopped (%s)", p.Target.Hot, p.Target.Stopped, p.Target.Schedule)
		}
		rollout := "-"
		if p.Live > 0 {
			rollout = fmt.Sprintf("%d/%d", p.OnSpec, p.Live)
		}
		rows[k] = []string{p.Pool, strconv.Itoa(p.Idle), strconv.Itoa(p.Warming), strconv.Itoa(p.Booting), strconv.Itoa(p.Claimed),
			strconv.Itoa(p.Running), strconv.Itoa(p.Stopped), fmt.Sprintf("%d (+%d held)", p.Offers, p.InFlight),
			strconv.Itoa(p.DeadLetters), target, rollout}
		for _, e := range p.Errors {
			problems = append(problems, p.Pool+": "+e)
		}
	}
	if err := table(cmd.OutOrStdout(), []string{"POOL", "IDLE", "WARMING", "BOOTING", "CLAIMED", "RUNNING", "STOPPED", "OFFERS", "DEAD LETTERS", "WARM TARGET", "ON CURRENT SPEC"}, rows); err != nil {
		return err
	}
	if jobs != nil {
		fmt.Fprintln(cmd.OutOrStdout())
		if err := table(cmd.OutOrStdout(), []string{"JOBS QUEUE", "WAITING", "HELD BY THE DISPATCHER", "DEAD LETTERS"},
			[][]string{{"label-routed jobs", strconv.Itoa(jobs.Waiting), strconv.Itoa(jobs.InFlight), strconv.Itoa(jobs.DeadLetters)}}); err != nil {
			return err
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("some counts could not be read (shown as 0):\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}
