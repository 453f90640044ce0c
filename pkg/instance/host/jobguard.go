package host

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/hangar-ci/hangar/pkg/contract/names"
	"github.com/hangar-ci/hangar/pkg/platform/ghapi"
)

// jobStartedHookVar is the runner's setting (read from its own environment) naming a script it
// runs before every job, with the job's GITHUB_* variables: a failing script fails the job before
// any of its steps runs. The real runner runs a .sh hook with bash.
const jobStartedHookVar = "ACTIONS_RUNNER_HOOK_JOB_STARTED"

// jobGuardFile is the hook's name in a run's root-owned directory (beside its runner and work
// directories, which the runner user owns).
const jobGuardFile = "job-started.sh"

// jobGuard is who may run jobs on a runner: the run (when Run is set) of the repository Repo.
// Run ids are public, so the run's label alone lets any job that can reach the runner (a fork's
// pull request in the same repository, another repository of an organisation runner group) land
// on it; the guard fails such a job before its first step. A runner routed by labels rather than
// by run id guards the repository alone: the same guard with Run left empty.
type jobGuard struct {
	Run  string // the workflow run id (decimal digits), or "" for any run of Repo
	Repo string // owner/name, compared without regard to case as GitHub does
}

// check refuses values that are not a run id and an owner/name repository: they are written
// into a shell script.
func (g jobGuard) check() error {
	if g.Run != "" {
		if err := names.ValidateRunID(g.Run); err != nil {
			return fmt.Errorf("job guard: %w", err)
		}
	}
	if _, err := ghapi.ParseScope(g.Repo, "repo"); err != nil {
		return fmt.Errorf("job guard: %w", err)
	}
	return nil
}

// script returns the hook: bash that exits 1, saying why, when the job's GITHUB_RUN_ID (if the
// guard names a run) or GITHUB_REPOSITORY is not the guard's. The values are checked first
// (digits; owner/name of letters, digits, '.', '_' and '-'), so nothing in them can end the
// quoting.
func (g jobGuard) script() (string, error) {
	if err := g.check(); err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("#!/bin/bash\n")
	b.WriteString("# Written by hangar-agent (root's, read-only): the runner runs it before every job.\n")
	fmt.Fprintf(&b, "want_repo='%s'\n", strings.ToLower(g.Repo))
	fmt.Fprintf(&b, "want_run='%s'\n", g.Run)
	b.WriteString(`repo=$(printf '%s' "${GITHUB_REPOSITORY:-}" | tr '[:upper:]' '[:lower:]')
run=${GITHUB_RUN_ID:-}
if [ "$repo" != "$want_repo" ] || { [ -n "$want_run" ] && [ "$run" != "$want_run" ]; }; then
  echo "::error::hangar: job refused: this runner serves ${want_run:+run $want_run of }$want_repo only, not run ${run:-?} of ${GITHUB_REPOSITORY:-?}"
  exit 1
fi
echo "hangar: job of run $run of ${GITHUB_REPOSITORY} accepted"
`)
	return b.String(), nil
}

// write installs the hook in dir (the run's root-owned directory) as a root-owned file the
// runner user may read and run but not change, replacing any earlier one in one rename, and
// returns its path.
func (g jobGuard) write(dir string) (string, error) {
	body, err := g.script()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, jobGuardFile)
	tmp, err := os.CreateTemp(dir, "."+jobGuardFile+"-*")
	if err != nil {
		return "", fmt.Errorf("write the job-started hook: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	_, err = tmp.WriteString(body)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o555)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return "", fmt.Errorf("write the job-started hook %s: %w", path, err)
	}
	return path, nil
}

// withJobStartedHook returns env with the runner's job-started hook set to path (replacing any
// setting already there).
func withJobStartedHook(env []string, path string) []string {
	out := slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, jobStartedHookVar+"=") })
	return append(out, jobStartedHookVar+"="+path)
}
