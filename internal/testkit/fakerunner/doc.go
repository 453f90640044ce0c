// Package fakerunner is the stand-in for the GitHub Actions runner (actions/runner) in tests and
// the local demo; it is never shipped. One binary plays config.sh (register), run.sh (go online,
// take jobs, run the job-started hook its environment names, then the job with sh -c in the work
// directory) and `config.sh remove` (deregister), against the ghfake server, with the real
// runner's flags and its .runner/.credentials files. Tarball and Install lay it out the way the
// real runner's release tarball is laid out.
package fakerunner
