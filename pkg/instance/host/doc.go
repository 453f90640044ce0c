// Package host isolates the runner user on an instance, so that one machine can serve many
// workflow runs one after another. What it guarantees, once Init has succeeded:
//
//   - every process of a run starts inside the run's cgroup, as the unprivileged runner user,
//     with user namespaces refused (unless the pool allows them); after the run the whole jobs
//     cgroup is killed and every process of the user (and its subordinate uids) with it;
//   - no run reaches the instance metadata endpoint, and with it the instance role: firewall rules
//     by cgroup and by uid, proved at init;
//   - nothing of a run is left for the next: its files (the run's directories, the home, the
//     temporary and other writable directories, never following a symlink), System V IPC objects,
//     at jobs and crontab (denied to the user besides), kernel keyrings, lingering, and what
//     Docker holds; Scrub checks that nothing is left and fails otherwise, and the instance must
//     then not serve again;
//   - the runner install is root's and read-only, and each run's job-started hook refuses jobs of
//     other runs or repositories.
//
// The agent (package agent) drives it through its own Host interface; cmd/agent wires the two.
// docs/security.md has the isolation model.
package host
