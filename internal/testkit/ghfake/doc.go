// Package ghfake is a stateful stand-in for the parts of GitHub Hangar talks to, for tests and the
// local demo; it is never shipped. It serves:
//
//   - the REST endpoints provision and release use (runner registration tokens, list, get and
//     delete runners, runner labels; remove tokens too, which Hangar no longer mints), for repositories and organisations, with
//     admin-token auth and token expiry, in the shapes go-github expects;
//   - a small runner-side protocol under /_fake/ that the stand-in runner (config.sh, run.sh and
//     config.sh remove, see package fakerunner) uses to register, go online and offline, take
//     jobs and deregister;
//   - a job queue: tests (or the demo) queue a job with labels and a shell command, and see which
//     runner ran it and what it printed.
//
// Every runner registration is recorded, so a test can assert that nothing stale remains.
package ghfake
