package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hangar-ci/hangar/pkg/operator"
)

func newInstance(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "instance ID",
		Short: "one instance: its state, run, agent's latest signal with its log tail, and why it ended",
		Long: `instance shows one instance as the stack's table holds it: its state and the reason for it, its
type and zone, the run it serves (or served last) and every repository it has served, its
agent's latest signal with the log tail the agent sent (a failed registration's or pre-runner
script's output), its last heartbeat, and, once terminated, why it ended. Items of ended
instances are kept for a week.`,
		Args: exactArgs(1, "one instance id (i-0123456789abcdef0)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := operator.CheckInstanceID(args[0]); err != nil {
				return err // before anything reaches AWS
			}
			in, err := open(cmd.Context(), g)
			if err != nil {
				return err
			}
			r, err := in.Instance(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if g.output == outputJSON {
				return writeJSON(cmd.OutOrStdout(), r)
			}
			return instanceText(cmd, r, time.Now())
		},
	}
}

func instanceText(cmd *cobra.Command, r *operator.InstanceReport, now time.Time) error {
	w := cmd.OutOrStdout()
	spec := "no"
	if r.OnSpec {
		spec = "yes"
	}
	run := orDash(r.Run)
	if r.Run != "" {
		run = fmt.Sprintf("%s (attempt %d) of %s", r.Run, r.RunAttempt, r.Repository)
	}
	rows := [][]string{
		{"instance", r.ID},
		{"pool", r.Pool},
		{"state", fmt.Sprintf("%s (version %d): %s", r.State, r.Version, orDash(r.Reason))},
		{"type", fmt.Sprintf("%s, %s, %s", orDash(r.Type), orDash(r.UsageClass), orDash(r.AZ))},
		{"current spec", spec},
		{"launched", when(r.LaunchedAt, now)},
		{"deadline", when(r.Deadline, now)},
		{"run", run},
		{"last run", orDash(r.LastRun)},
		{"served", orDash(strings.Join(r.Served, ", "))},
		{"signal", signalText(r, now)},
		{"heartbeat", when(r.HeartbeatAt, now)},
		{"agent", orDash(r.AgentVersion)},
		{"failed registrations", strconv.Itoa(r.RegisterFailures)},
	}
	if r.Ended != "" {
		rows = append(rows, []string{"ended", r.Ended})
	}
	for _, row := range rows {
		if _, err := fmt.Fprintf(w, "%-21s %s\n", row[0]+":", strings.ReplaceAll(clean(row[1]), "\n", " ")); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "\ntimeline:")
	for _, e := range r.Events {
		fmt.Fprintf(w, "  %s  %s\n", e.At.UTC().Format("2006-01-02 15:04:05.000Z"), strings.ReplaceAll(clean(e.What), "\n", " "))
	}
	if r.LogTail != "" {
		fmt.Fprintf(w, "\nlog tail (with the %s signal):\n", r.Signal)
		for _, l := range strings.Split(strings.TrimRight(clean(r.LogTail), "\n"), "\n") {
			fmt.Fprintln(w, "  "+l)
		}
	}
	return nil
}

func signalText(r *operator.InstanceReport, now time.Time) string {
	if r.Signal == "" {
		return "-"
	}
	s := r.Signal
	if r.SignalRun != "" {
		s += " for run " + r.SignalRun
	}
	return fmt.Sprintf("%s at version %d, %s", s, r.SignalVersion, when(r.SignalAt, now))
}
