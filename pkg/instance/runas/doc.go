// Package runas is what the agent has done as, or on its way to, the runner user: start a runner
// script (ExecCommand: inside the run's cgroup, user namespaces refused, a session keyring of its
// own, then the runner user's uid and groups), prove that the user cannot reach the metadata
// endpoint (ProbeCommand), and clear the user's kernel keyrings after a run
// (ClearKeyringsCommand).
//
// Each is a command of its own process, which the agent starts: the small binary cmd/agent/runas
// (installed as hangar-runas beside the agent), or, where that is missing, the agent's own binary,
// whose hidden subcommands are the same. The package imports nothing but the standard library
// (not package net, whose initialisation alone took 0.8 ms of CPU) and golang.org/x/sys, so that
// the small binary starts in about 1.2 ms of CPU: the agent starts one
// for each runner script, two per run, where its own binary's start-up (the AWS SDK's package
// initialisation) cost some 7 ms of CPU each.
package runas
