// Package runas is what the agent has done as, or on its way to, the runner user: start a runner
// script (ExecCommand: inside the run's cgroup, user namespaces refused, a session keyring of its
// own, then the runner user's uid and groups), prove that the user cannot reach the metadata
// endpoint (ProbeCommand), and clear the user's kernel keyrings after a run
// (ClearKeyringsCommand).
//
// Each is a command of its own process, which the agent starts: the small binary cmd/agent/runas
// (installed as hangar-runas beside the agent), or, where that is missing, the agent's own binary,
// whose hidden subcommands are the same. The package imports nothing but the standard library (not
// even package net) and golang.org/x/sys, so that the small binary starts at a fraction of the
// agent's own start-up cost (the AWS SDK's package initialisation): the agent starts one for each
// runner script, two per run. docs/benchmarks.md has the measurements.
package runas
