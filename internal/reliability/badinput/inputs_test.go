package badinput

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/awsproxy"
	"github.com/hangar-ci/hangar/internal/testkit/localenv"
)

// The step binaries a case runs.
const (
	provisionStep = "provision"
	releaseStep   = "release"
	refreshStep   = "hangar refresh"
)

// Exit codes of the steps (internal/wire/step.Main): 2 is input refused before any request, 1 a
// failure once running (here: refused after reading the pool document or the stack).
const (
	exitInput = 2
	exitRun   = 1
)

// stepCase is an action input (or workflow variable) a step refuses.
type stepCase struct {
	name string
	step string
	set  map[string]string // variables changed from localenv.StepEnv (unset removes one)
	exit int
	want []string // in the step's log: the input's name and what it accepts
	// unclear, when set, is how the refusal falls short of naming the input and what it accepts
	// (a reported product gap; the case asserts what the message does say).
	unclear string
}

// caseRun is the run id the cases' steps are given.
const caseRun = "4200"

// stepCases are the action-input cases.
func stepCases(w *world) []stepCase {
	stack, pool := w.Stack, w.Pool
	cases := []stepCase{
		// provision: instance-count
		sc("instance-count zero", provisionStep, env("HANGAR_INSTANCE_COUNT", "0"), exitInput, []string{"instance-count: 0: want 1 to 100"}),
		sc("instance-count above 100", provisionStep, env("HANGAR_INSTANCE_COUNT", "101"), exitInput, []string{"instance-count: 101: want 1 to 100"}),
		sc("instance-count not a number", provisionStep, env("HANGAR_INSTANCE_COUNT", "three"), exitInput,
			[]string{`instance-count: "three": want a whole number from 1 to 100`}),
		sc("instance-count negative", provisionStep, env("HANGAR_INSTANCE_COUNT", "-2"), exitInput, []string{"instance-count: -2: want 1 to 100"}),
		// pool
		sc("pool name malformed", provisionStep, env("HANGAR_POOL", "Linux_X64"), exitInput,
			[]string{`pool: pool name "Linux_X64" is malformed: want 1 to 48 of a-z, 0-9 and '-'`}),
		sc("pool empty", provisionStep, env("HANGAR_POOL", unset), exitInput, []string{"pool: empty: want the name of a pool of the stack"}),
		sc("pool unknown", provisionStep, env("HANGAR_POOL", "gpu-x64"), exitRun,
			[]string{"pool: read pool document /hangar/" + stack + "/pools/gpu-x64", "ParameterNotFound"}),
		// labels
		sc("label all digits", provisionStep, env("HANGAR_LABELS", "gpu,4201"), exitInput,
			[]string{`labels: "4201": all digits could name another run; want at least one letter`}),
		sc("label with shell characters", provisionStep, env("HANGAR_LABELS", "gpu;reboot"), exitInput,
			[]string{`labels: "gpu;reboot": want 1 to 64 of letters, digits, '.', '_' and '-'`}),
		sc("label too long", provisionStep, env("HANGAR_LABELS", strings65), exitInput,
			[]string{`labels: "` + strings65 + `": want 1 to 64 of letters`}),
		// max-runtime
		sc("max-runtime not a duration", provisionStep, env("HANGAR_MAX_RUNTIME", "forever"), exitInput,
			[]string{`max-runtime: "forever": want a duration such as 90s, 30m or 2h`}),
		sc("max-runtime zero", provisionStep, env("HANGAR_MAX_RUNTIME", "0s"), exitInput,
			[]string{`max-runtime: "0s": want a duration above zero`}),
		sc("max-runtime under a minute", provisionStep, env("HANGAR_MAX_RUNTIME", "30s"), exitInput,
			[]string{"max-runtime: 30s: want a duration of at least 1m"}),
		sc("max-runtime above the pool's", provisionStep, env("HANGAR_MAX_RUNTIME", "7h"), exitRun,
			[]string{"max-runtime: 7h0m0s: the pool allows at most 6h0m0s"}),
		// registration-timeout
		sc("registration-timeout too short", provisionStep, env("HANGAR_REGISTRATION_TIMEOUT", "1s"), exitInput,
			[]string{"registration-timeout: 1s: want 10s to 1h0m0s"}),
		sc("registration-timeout negative", provisionStep, env("HANGAR_REGISTRATION_TIMEOUT", "-5m"), exitInput,
			[]string{`registration-timeout: "-5m": want a duration above zero`}),
		// usage-class
		sc("usage-class unknown", provisionStep, env("HANGAR_USAGE_CLASS", "reserved"), exitInput,
			[]string{`usage-class: "reserved": want spot, on-demand or spot-fallback`}),
		// allowed-instance-types, min-vcpu, min-memory-mib
		sc("instance type pattern malformed", provisionStep, env("HANGAR_ALLOWED_INSTANCE_TYPES", "C7I.*"), exitInput,
			[]string{`allowed-instance-types: instance type pattern "C7I.*" is malformed: want 1 to 64 of a-z, 0-9`}),
		sc("instance types matching none of the pool's", provisionStep, env("HANGAR_ALLOWED_INSTANCE_TYPES", "p5.*"), exitRun,
			[]string{"allowed-instance-types, min-vcpu, min-memory-mib: no instance type of pool " + pool, "the pool has c7i.large"}),
		sc("min-vcpu not a number", provisionStep, env("HANGAR_MIN_VCPU", "lots"), exitInput, []string{`min-vcpu: "lots": want a whole number`}),
		sc("min-vcpu out of range", provisionStep, env("HANGAR_MIN_VCPU", "4096"), exitInput, []string{"min-vcpu: 4096: want 0 to 1024"}),
		sc("min-vcpu no pool type has", provisionStep, env("HANGAR_MIN_VCPU", "96"), exitRun,
			[]string{"allowed-instance-types, min-vcpu, min-memory-mib: no instance type of pool " + pool, "at least 96 vCPU"}),
		sc("min-memory-mib negative", provisionStep, env("HANGAR_MIN_MEMORY_MIB", "-1"), exitInput, []string{"min-memory-mib: -1: want 0 to"}),
		// runner-scope, runner-group
		sc("runner-scope unknown", provisionStep, env("HANGAR_RUNNER_SCOPE", "enterprise"), exitInput,
			[]string{`runner-scope: "enterprise": want repo or org`}),
		sc("runner-group malformed", provisionStep, env("HANGAR_RUNNER_SCOPE", "org", "HANGAR_RUNNER_GROUP", "ci/../admins"), exitInput,
			[]string{`runner-group: "ci/../admins": want an organisation runner group's name`}),
		sc("runner-group with repo scope", provisionStep, env("HANGAR_RUNNER_GROUP", "ci"), exitRun,
			[]string{`runner-group: "ci" with runner-scope repo: runner groups exist only for organisation runners`}),
		sc("org scope without a runner group", provisionStep, env("HANGAR_RUNNER_SCOPE", "org"), exitRun,
			[]string{"runner-group: empty with runner-scope org: want the organisation runner group"}),
		sc("runner group Default", provisionStep, env("HANGAR_RUNNER_SCOPE", "org", "HANGAR_RUNNER_GROUP", "Default"), exitRun,
			[]string{`runner-group: "Default": the Default group is open to every repository`}),
		// tags
		sc("tag with a reserved key", provisionStep, env("HANGAR_TAGS", "team=ci,hangar:run-id=1"), exitInput,
			[]string{`tags: "hangar:run-id": the hangar: prefix is reserved`}),
		sc("tag without a value", provisionStep, env("HANGAR_TAGS", "team"), exitInput,
			[]string{`tags: "team": want key=value pairs separated by commas or new lines`}),
		sc("tag with an aws: key", provisionStep, env("HANGAR_TAGS", "aws:cloudformation:stack-name=x"), exitInput,
			[]string{`tags: "aws:cloudformation:stack-name": want a tag key`, `does not start with "aws:"`}),
		// github-token
		sc("github-token empty", provisionStep, env("HANGAR_GITHUB_TOKEN", unset), exitInput,
			[]string{"github-token: empty: want a GitHub App installation token or a PAT"}),
		// the workflow's context
		sc("GITHUB_RUN_ID missing", provisionStep, env("GITHUB_RUN_ID", unset), exitInput,
			[]string{"GITHUB_RUN_ID: run id is empty: want the workflow's github.run_id"}),
		sc("GITHUB_RUN_ID malformed", provisionStep, env("GITHUB_RUN_ID", "0x10"), exitInput,
			[]string{`GITHUB_RUN_ID: run id "0x10" is malformed: want the workflow's github.run_id (1 to 20 decimal digits`}),
		sc("GITHUB_RUN_ATTEMPT malformed", provisionStep, env("GITHUB_RUN_ATTEMPT", "first"), exitInput,
			[]string{`run-attempt: "first": want a whole number (GITHUB_RUN_ATTEMPT)`}),
		sc("GITHUB_REPOSITORY without a name", provisionStep, env("GITHUB_REPOSITORY", "octo"), exitInput,
			[]string{`GITHUB_REPOSITORY: repository "octo": want owner/name`}),
		sc("GITHUB_REPOSITORY missing", provisionStep, env("GITHUB_REPOSITORY", unset), exitInput,
			[]string{`GITHUB_REPOSITORY: repository "": want owner/name`}),
		sc("GITHUB_API_URL plain http elsewhere", provisionStep, env("GITHUB_API_URL", "http://api.example.com"), exitInput,
			[]string{`GITHUB_API_URL: "http://api.example.com": want an https URL such as https://github.com`}),
		sc("GITHUB_SERVER_URL not a URL", provisionStep, env("GITHUB_SERVER_URL", "github.com"), exitInput,
			[]string{`GITHUB_SERVER_URL: "github.com": want an https URL such as https://github.com`}),
		sc("HANGAR_RUN_ID differing from the workflow's", provisionStep, env("GITHUB_ACTIONS", "true", "HANGAR_RUN_ID", "999"), exitInput,
			[]string{`run-id: HANGAR_RUN_ID says "999", the workflow's GITHUB_RUN_ID is "` + caseRun + `"`}),
		// stack
		sc("stack malformed", provisionStep, env("HANGAR_STACK", "my stack"), exitInput,
			[]string{`stack: "my stack": want the Hangar stack's name (1 to 63 letters, digits and '-'`}),
		sc("stack unknown", provisionStep, env("HANGAR_STACK", stack+"-gone"), exitRun,
			[]string{"pool: read pool document /hangar/" + stack + "-gone/pools/" + pool, "ParameterNotFound"}),

		// release
		sc("release: GITHUB_RUN_ID malformed", releaseStep, env("GITHUB_RUN_ID", "run-1"), exitInput,
			[]string{`GITHUB_RUN_ID: run id "run-1" is malformed: want the workflow's github.run_id`}),
		sc("release: deregister-timeout zero", releaseStep, env("HANGAR_DEREGISTER_TIMEOUT", "0"), exitInput,
			[]string{`deregister-timeout: "0": want a duration above zero`}),
		sc("release: deregister-timeout not a duration", releaseStep, env("HANGAR_DEREGISTER_TIMEOUT", "2 minutes"), exitInput,
			[]string{`deregister-timeout: "2 minutes": want a duration such as 90s, 30m or 2h`}),
		sc("release: github-token empty", releaseStep, env("HANGAR_GITHUB_TOKEN", unset), exitInput,
			[]string{"github-token: empty: want a GitHub App installation token or a PAT"}),
		sc("release: runner-scope unknown", releaseStep, env("HANGAR_RUNNER_SCOPE", "everywhere"), exitInput,
			[]string{`runner-scope "everywhere": want repo or org`}),
		sc("release: GITHUB_REPOSITORY malformed", releaseStep, env("GITHUB_REPOSITORY", "octo/app/extra"), exitInput,
			[]string{`GITHUB_REPOSITORY / runner-scope: repository "octo/app/extra": want owner/name`}),
		sc("release: stack unknown", releaseStep, env("HANGAR_STACK", stack+"-gone"), exitRun,
			[]string{`stack "` + stack + `-gone": no such stack: no pool documents under /hangar/` + stack + `-gone/pools/: is the stack name right`}),

		// hangar refresh
		sc("refresh: dry-run not a boolean", refreshStep, env("HANGAR_DRY_RUN", "yes"), exitInput, []string{`dry-run: "yes": want true or false`}),
		sc("refresh: pools malformed", refreshStep, env("HANGAR_POOLS", pool+",GPU"), exitInput,
			[]string{`pools: pool name "GPU" is malformed: want 1 to 48 of a-z, 0-9 and '-'`}),
		sc("refresh: pool unknown", refreshStep, env("HANGAR_POOLS", "gpu-x64"), exitRun,
			[]string{`pools: "gpu-x64" is not a pool of stack ` + stack + ` (its pools: ` + pool + `)`}),
		sc("refresh: stack malformed", refreshStep, env("HANGAR_STACK", "-stack"), exitInput,
			[]string{`stack: "-stack": want the Hangar stack's name`}),
		sc("refresh: stack unknown", refreshStep, env("HANGAR_STACK", stack+"-gone"), exitRun,
			[]string{"invoke the refresh function " + stack + "-gone-refresh", "ResourceNotFoundException: Function not found"}),
	}
	for i := range cases {
		cases[i].unclear = unclearInputs[cases[i].name]
	}
	return cases
}

// unclearInputs are the refusals that name the input, or what it accepts, less clearly than the
// others (reported product gaps; the cases assert what the messages do say).
var unclearInputs = map[string]string{
	"pool unknown":           "names the input and the SSM parameter, not the stack's pools (refresh's refusal lists them)",
	"stack unknown":          "blames the pool input; the stack is named only inside the SSM path (release says: is the stack name right, and is the stack deployed in this account and region?)",
	"refresh: stack unknown": "does not name the stack input: a Lambda ResourceNotFoundException for the function the stack's name makes",
}

// sc is a step case.
func sc(name, step string, set map[string]string, exit int, want []string) stepCase {
	return stepCase{name: name, step: step, set: set, exit: exit, want: want}
}

// strings65 is a label one character too long.
const strings65 = "abcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcdefghijabcde"

// env builds a case's variables from key, value pairs.
func env(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// stepRun runs one step case and checks the refusal: the exit code, the message, no output, no
// mutating AWS call, no GitHub request that could change anything, and the pool untouched.
func (w *world) stepRun(c stepCase) func(t *testing.T) {
	return func(t *testing.T) {
		count := 1
		if c.step == releaseStep || c.step == refreshStep {
			count = 0
		}
		e := w.stepEnv(caseRun, count, c.set)
		w.counts()
		w.github.Take()
		var (
			res localenv.StepResult
			err error
		)
		switch c.step {
		case provisionStep:
			res, err = localenv.RunStep(w.ctx, w.provisionBin, e, w.dir)
		case releaseStep:
			res, err = localenv.RunStep(w.ctx, w.releaseBin, e, w.dir)
		case refreshStep:
			res, err = localenv.RunRefreshStep(w.ctx, w.hangarBin, e, w.dir)
		}
		ops, gh := w.counts(), w.github.Take()
		t.Logf("exit %d, AWS %v, GitHub %v\n%s", exitCode(err), ops, gh, res.Log)
		require.Equal(t, c.exit, exitCode(err), "exit code\n%s", res.Log)
		for _, x := range c.want {
			require.Contains(t, res.Log, x)
		}
		require.Contains(t, res.Log, "::error::", "the refusal is a workflow error annotation")
		require.Empty(t, res.Outputs, "a refused step sets no output")
		require.Empty(t, awsproxy.MutatingOps(ops), "mutating AWS calls for a bad input")
		require.Empty(t, writes(gh), "GitHub requests that could change something, for a bad input")
		if c.exit == exitInput {
			require.Empty(t, ops, "input refused before any request")
			require.Empty(t, gh, "input refused before any request")
		}
		w.untouched(t)
		if c.unclear != "" {
			t.Logf("unclear message (reported): %s", c.unclear)
		}
	}
}
