package localenv

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// StepEnv is the environment the action gives its step binary for run: its inputs as HANGAR_*
// variables, the workflow context as GITHUB_*, pointed at the local world.
func (e *Env) StepEnv(run string, count int, dir string) []string {
	return append(e.Environ(),
		"HANGAR_STACK="+e.Stack, "HANGAR_POOL="+e.Pool, "HANGAR_INSTANCE_COUNT="+strconv.Itoa(count),
		"HANGAR_GITHUB_TOKEN="+AdminToken, "GITHUB_RUN_ID="+run, "GITHUB_RUN_ATTEMPT=1",
		"GITHUB_REPOSITORY="+Repo, "GITHUB_SERVER_URL="+e.GH.URL(), "GITHUB_API_URL="+e.GH.URL(),
		"GITHUB_OUTPUT="+filepath.Join(dir, "output"), "GITHUB_STEP_SUMMARY="+filepath.Join(dir, "summary"))
}

// StepResult is what a step binary left: its outputs and its step summary.
type StepResult struct {
	Outputs map[string]string
	Summary string
	Log     string
}

// RunStep runs a step binary with env (see StepEnv) in dir and reads what it wrote there. The
// binary must be a local world build (testbuild's) to accept the plain-http GitHub stand-in.
func RunStep(ctx context.Context, bin string, env []string, dir string) (StepResult, error) {
	return runStep(ctx, env, dir, bin)
}

// RunRefreshStep runs the hangar binary (cmd/hangar) as the action's refresh mode does (hangar refresh), with
// env (see StepEnv; ServeRefresh first) in dir, and reads what it wrote there.
func RunRefreshStep(ctx context.Context, bin string, env []string, dir string) (StepResult, error) {
	return runStep(ctx, env, dir, bin, "refresh")
}

func runStep(ctx context.Context, env []string, dir, bin string, args ...string) (StepResult, error) {
	for _, f := range []string{"output", "summary"} {
		_ = os.Remove(filepath.Join(dir, f))
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	res := StepResult{Outputs: map[string]string{}, Log: string(out)}
	if b, rerr := os.ReadFile(filepath.Join(dir, "summary")); rerr == nil {
		res.Summary = string(b)
	}
	if f, rerr := os.Open(filepath.Join(dir, "output")); rerr == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() { // name<<delimiter, value, delimiter (the file command format)
			name, delim, ok := strings.Cut(sc.Text(), "<<")
			if !ok || !sc.Scan() {
				continue
			}
			res.Outputs[name] = sc.Text()
			for sc.Text() != delim && sc.Scan() {
			}
		}
	}
	if err != nil {
		return res, fmt.Errorf("%s: %w\n%s", filepath.Base(bin), err, out)
	}
	return res, nil
}
