// Package ghfake is a stateful stand-in for the parts of GitHub Hangar talks to, for tests and the
// local demo; it is never shipped. It serves:
//
//   - the REST endpoints provision and release use (runner registration tokens, list, get and
//     delete runners, runner labels; remove tokens too, which Hangar no longer mints), for repositories and organisations, with
//     admin-token auth and token expiry, in the shapes go-github expects; deleting a runner that
//     is running a job is refused (422), as GitHub refuses it;
//   - a GitHub App (app.go): EnableApp gives it a private key, Install installs it on accounts,
//     and POST /app/installations/{id}/access_tokens trades a JWT signed with the key for an
//     installation token, which authenticates the REST endpoints for the installation's owner
//     until it expires (SetInstallationTokenTTL, ExpireInstallationTokens);
//   - just-in-time runners (jit.go): generate-jitconfig for repositories and organisations, and
//     the organisation's runner groups (the default one, id 1, and SetGroup's); a just-in-time
//     runner opens one session, takes one job, and is removed once that job is done;
//   - a small runner-side protocol under /_fake/ that the stand-in runner (config.sh, run.sh and
//     config.sh remove, see package fakerunner) uses to register, go online and offline, take
//     jobs, send heartbeats while it runs one, and deregister; a runner silent for too long
//     mid-job is lost (liveness.go: the job fails, the runner is offline and idle);
//   - a job queue: tests (or the demo) queue a job with labels and a shell command, and see which
//     runner ran it and what it printed; CancelJob cancels one;
//   - the App's workflow_job webhook (webhooks.go): with SetWebhook, every job state change is
//     delivered, signed, in GitHub's payload shape, and recorded (Deliveries); tests pause,
//     drop, redeliver and send deliveries of their own to play GitHub's delivery faults.
//
// Every runner registration is recorded, so a test can assert that nothing stale remains, and
// every request is counted (RequestCount, Requests), so a benchmark can report GitHub requests
// per job.
package ghfake
