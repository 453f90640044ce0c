// Package fakerunner is the stand-in for the GitHub Actions runner (actions/runner) in tests and
// the local demo; it is never shipped. One binary plays config.sh (register), run.sh (go online,
// take jobs, run the job-started hook its environment names, then the job with sh -c in the work
// directory) and `config.sh remove` (deregister), against the ghfake server, with the real
// runner's flags and its .runner/.credentials files. Given a just-in-time configuration
// (`run.sh --jitconfig`, or ACTIONS_RUNNER_INPUT_JITCONFIG in its environment) run.sh needs no
// files: it takes exactly one job and exits. While it runs a job, the runner sends the server a
// heartbeat every half second, and stops the job when the server says it was cancelled; stopped
// itself (SIGINT, SIGTERM) mid-job, it reports the job cancelled before it goes offline.
// Tarball and Install lay it out the way the real runner's release tarball is laid out.
package fakerunner
