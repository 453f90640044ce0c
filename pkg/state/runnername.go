package state

import "strings"

// runnerPrefix starts the name of every runner Hangar registers.
const runnerPrefix = "hangar-"

// RunnerName is the name of the runner an instance registers for a run: derived from the
// instance and the run, so that a stale registration of the same pair is replaced rather than
// duplicated, and so that ParseRunnerName can tell which instance and run a runner belongs to.
func RunnerName(instanceID, run string) string { return runnerPrefix + instanceID + "-" + run }

// ParseRunnerName splits a name made by RunnerName; ok is false for any other name.
func ParseRunnerName(name string) (instanceID, run string, ok bool) {
	rest, found := strings.CutPrefix(name, runnerPrefix)
	if !found {
		return "", "", false
	}
	i := strings.LastIndex(rest, "-")
	if i < 0 {
		return "", "", false
	}
	instanceID, run = rest[:i], rest[i+1:]
	if ValidateInstanceID(instanceID) != nil || ValidateRunID(run) != nil {
		return "", "", false
	}
	return instanceID, run, true
}
