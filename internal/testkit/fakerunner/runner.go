package fakerunner

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hangar-ci/hangar/internal/testkit/ghfake"
)

// settings is what config writes to .runner.
type settings struct {
	ID     int64    `json:"id"`
	Name   string   `json:"name"`
	Labels []string `json:"labels"`
	URL    string   `json:"url"`
	Work   string   `json:"work"`
}

type credentials struct {
	Credential string `json:"credential"`
}

// Main runs the stand-in runner with args (config ... or run ...) in runner directory root, and
// returns the process exit code.
func Main(root string, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: fake-runner config|run ...")
		return 2
	}
	var err error
	switch args[0] {
	case "config":
		err = configure(root, args[1:], stdout)
	case "run":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		err = run(ctx, root, args[1:], stdout)
	default:
		err = fmt.Errorf("unknown command %q", args[0])
	}
	if err != nil {
		fmt.Fprintln(stderr, "Error:", err)
		return 1
	}
	return 0
}

func configure(root string, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("config", flag.ContinueOnError)
	u := fs.String("url", "", "")
	tok := fs.String("token", "", "")
	name := fs.String("name", "", "")
	labels := fs.String("labels", "", "")
	work := fs.String("work", "_work", "")
	unattended := fs.Bool("unattended", false, "")
	replace := fs.Bool("replace", false, "")
	noDefault := fs.Bool("no-default-labels", false, "")
	group := fs.String("runnergroup", "", "")
	fs.Bool("disableupdate", false, "")
	fs.Bool("ephemeral", false, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !*unattended {
		return errors.New("interactive configuration is not supported by the stand-in; pass --unattended")
	}
	inputFromEnv(u, "URL")
	inputFromEnv(tok, "TOKEN")
	if *u == "" || *tok == "" || *name == "" {
		return errors.New("--url, --token and --name are required")
	}
	if _, err := os.Stat(filepath.Join(root, ".runner")); err == nil && !*replace {
		return errors.New("cannot configure the runner because it is already configured; remove it first")
	}
	var ls []string
	if !*noDefault {
		ls = append(ls, "self-hosted", "Linux", "X64")
	}
	for _, l := range strings.Split(*labels, ",") {
		if l = strings.TrimSpace(l); l != "" {
			ls = append(ls, l)
		}
	}
	fmt.Fprintf(out, "--------------------------------------------------------------------------------\n")
	fmt.Fprintf(out, "Connecting to %s as %s with labels %s\n", *u, *name, strings.Join(ls, ","))
	var resp ghfake.RegisterResponse
	if err := post(*u, "/_fake/register", "", ghfake.RegisterRequest{URL: *u, Token: *tok, Name: *name, Labels: ls, Replace: *replace, Group: *group}, &resp); err != nil {
		return err
	}
	w := *work
	if !filepath.IsAbs(w) {
		w = filepath.Join(root, w)
	}
	if err := writeJSON(filepath.Join(root, ".runner"), settings{ID: resp.ID, Name: *name, Labels: ls, URL: *u, Work: w}); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(root, ".credentials"), credentials{resp.Credential}); err != nil {
		return err
	}
	fmt.Fprintf(out, "√ Runner successfully added\n√ Settings Saved.\n")
	return nil
}

// run goes online and takes jobs until ctx ends: as the runner configured in root (.runner,
// .credentials), or, given a just-in-time configuration (--jitconfig, or
// ACTIONS_RUNNER_INPUT_JITCONFIG), as that runner, for one job (see runJIT).
func run(ctx context.Context, root string, args []string, out io.Writer) error {
	jit := flagValue(args, "jitconfig")
	inputFromEnv(&jit, "JITCONFIG")
	if jit != "" {
		return runJIT(ctx, root, jit, out)
	}
	st, err := readSettings(root)
	if err != nil {
		return err
	}
	var cred credentials
	if err := readJSON(filepath.Join(root, ".credentials"), &cred); err != nil {
		return err
	}
	return (&session{st: st, auth: "Runner " + cred.Credential, out: out}).listen(ctx)
}

// flagValue returns the value of --name (or -name) in args, given as "--name value" or
// "--name=value"; other arguments are ignored, as run.sh's other options are by the stand-in.
func flagValue(args []string, name string) string {
	for i, a := range args {
		a = strings.TrimLeft(a, "-")
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// session is one run of the runner: online from listen's start to its end.
type session struct {
	st   settings
	auth string // the runner's credential, as the Authorization header carries it
	once bool   // a just-in-time runner: it takes one job, then ends its session
	out  io.Writer
}

// status tells the server the runner is online or offline.
func (r *session) status(s string) error {
	return post(r.st.URL, fmt.Sprintf("/_fake/runners/%d/status", r.st.ID), r.auth, map[string]string{"status": s}, nil)
}

// listen goes online, then takes jobs, one at a time, until ctx ends (or, once, after its one
// job), and goes offline. A job running when ctx ends is cancelled and reported so.
func (r *session) listen(ctx context.Context) error {
	if err := r.status("online"); err != nil {
		return err
	}
	fmt.Fprintf(r.out, "√ Connected to GitHub\n\n%s: Listening for Jobs\n", now())
	defer func() { _ = r.status("offline") }() // a just-in-time runner is gone after its job: 404, ignored
	for ctx.Err() == nil {
		var job ghfake.JobAssignment
		err := postCtx(ctx, r.st.URL, fmt.Sprintf("/_fake/runners/%d/next", r.st.ID), r.auth, struct{}{}, &job)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil && r.once && hasStatus(err, http.StatusNotFound):
			return fmt.Errorf("the runner registration has been deleted from the server: %w", err)
		case err != nil:
			fmt.Fprintln(r.out, "poll for jobs:", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		case job.ID == 0:
			continue
		}
		fmt.Fprintf(r.out, "%s: Running job: job-%d (%s)\n", now(), job.ID, job.Repo)
		res := r.work(ctx, job)
		if err := post(r.st.URL, fmt.Sprintf("/_fake/runners/%d/jobs/%d", r.st.ID, job.ID), r.auth, res, nil); err != nil {
			fmt.Fprintln(r.out, "report job:", err)
		}
		fmt.Fprintf(r.out, "%s: Job job-%d completed with result: %s\n", now(), job.ID, result(res.Conclusion))
		if r.once {
			return nil
		}
	}
	return nil
}

// work runs a job (runJob) while sending the server a heartbeat every ghfake.HeartbeatEvery. The
// job is cancelled, its processes killed and its conclusion cancelled, when ctx ends (the runner
// is stopped) or a heartbeat's answer says so (the job was cancelled on the server, or is no
// longer this runner's).
func (r *session) work(ctx context.Context, job ghfake.JobAssignment) ghfake.JobResult {
	jobCtx, cancel := context.WithCancel(ctx)
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		r.heartbeats(jobCtx, job.ID, cancel)
	}()
	res := runJob(jobCtx, r.st, job)
	cancelled := jobCtx.Err() != nil
	cancel()
	<-beating
	if cancelled {
		res.Conclusion = "cancelled"
		res.Output += "\nThe operation was canceled."
	}
	return res
}

// heartbeats tells the server the job is still running until ctx ends, and calls cancel when the
// server answers that the job is to stop.
func (r *session) heartbeats(ctx context.Context, job int64, cancel func()) {
	t := time.NewTicker(ghfake.HeartbeatEvery)
	defer t.Stop()
	path := fmt.Sprintf("/_fake/runners/%d/jobs/%d/heartbeat", r.st.ID, job)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var hb ghfake.Heartbeat
		err := postCtx(ctx, r.st.URL, path, r.auth, struct{}{}, &hb)
		if ctx.Err() == nil && (hb.Cancel || hasStatus(err, http.StatusNotFound)) {
			cancel()
			return
		}
		// Any other failure is the network's: the server takes the runner for lost if it lasts.
	}
}

// result is how the real runner's log names a conclusion.
func result(conclusion string) string {
	switch conclusion {
	case "success":
		return "Succeeded"
	case "cancelled":
		return "Canceled"
	}
	return "Failed"
}

// now is the time as the real runner's log shows it.
func now() string { return time.Now().UTC().Format("2006-01-02 15:04:05Z") }

// runJob runs the job's command in <work>/<repo>/<repo>, as the real runner lays out checkouts,
// after the job-started hook (see runHook): a failing hook fails the job and its command never
// runs.
func runJob(ctx context.Context, st settings, job ghfake.JobAssignment) ghfake.JobResult {
	name := job.Repo[strings.LastIndex(job.Repo, "/")+1:]
	dir := filepath.Join(st.Work, name, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return ghfake.JobResult{Conclusion: "failure", Output: err.Error()}
	}
	env := append(os.Environ(), "GITHUB_REPOSITORY="+job.Repo, "GITHUB_RUN_ID="+job.RunID, "GITHUB_ACTIONS=true",
		"RUNNER_NAME="+st.Name, "GITHUB_WORKSPACE="+dir)
	var buf bytes.Buffer
	conclusion := "success"
	if err := runHook(ctx, dir, env, &buf); err != nil {
		conclusion = "failure"
		fmt.Fprintf(&buf, "\n%v", err)
	} else {
		cmd := exec.CommandContext(ctx, "sh", "-c", job.Command)
		killGroupOnCancel(cmd)
		cmd.Dir = dir
		cmd.Env = env
		cmd.Stdout, cmd.Stderr = &buf, &buf
		if err := cmd.Run(); err != nil {
			conclusion = "failure"
			fmt.Fprintf(&buf, "\n%v", err)
		}
	}
	outText := buf.String()
	if len(outText) > 64<<10 {
		outText = outText[len(outText)-64<<10:]
	}
	return ghfake.JobResult{Conclusion: conclusion, Output: outText}
}

// hookVar is the real runner's setting, read from its own environment, naming the script it runs
// before every job (in its "Set up runner" step, with the job's environment; .sh scripts with
// bash; the output goes to the job's log; a failure fails the job before its first step).
const hookVar = "ACTIONS_RUNNER_HOOK_JOB_STARTED"

// runHook runs the job-started hook, when the runner's environment names one, as the real runner
// does.
func runHook(ctx context.Context, dir string, env []string, out io.Writer) error {
	script := os.Getenv(hookVar)
	if script == "" {
		return nil
	}
	fmt.Fprintf(out, "A job started hook has been configured by the self-hosted runner administrator\nRun '%s'\n", script)
	cmd := exec.CommandContext(ctx, "bash", "-e", script)
	killGroupOnCancel(cmd)
	cmd.Dir = dir
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("the job started hook %s failed: %w", script, err)
	}
	return nil
}

// post sends body as JSON to the stand-in server that runnerURL lives on, and decodes the reply
// into out (when non-nil and there is one).
func post(runnerURL, path, auth string, body, out any) error {
	return postCtx(context.Background(), runnerURL, path, auth, body, out)
}

// postCtx is post, abandoned when ctx ends: the runner's long poll for jobs ends at once when it
// is told to stop, as the real runner's does.
func postCtx(ctx context.Context, runnerURL, path, auth string, body, out any) error {
	u, err := url.Parse(runnerURL)
	if err != nil {
		return fmt.Errorf("url %q: %w", runnerURL, err)
	}
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.Scheme+"://"+u.Host+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		var e struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(data, &e)
		return &statusError{code: resp.StatusCode, path: path, message: e.Message}
	}
	if out != nil && len(data) > 0 {
		return json.Unmarshal(data, out)
	}
	return nil
}

// statusError is the server's refusal of a request.
type statusError struct {
	code          int
	path, message string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("http response code: %d from 'POST %s': %s", e.code, e.path, e.message)
}

// hasStatus reports whether err is the server's answer code.
func hasStatus(err error, code int) bool {
	var se *statusError
	return errors.As(err, &se) && se.code == code
}

// inputFromEnv fills an unset flag from ACTIONS_RUNNER_INPUT_<name>, as the real runner does.
func inputFromEnv(p *string, name string) {
	if *p == "" {
		*p = os.Getenv("ACTIONS_RUNNER_INPUT_" + name)
	}
}

func readSettings(root string) (settings, error) {
	var st settings
	if err := readJSON(filepath.Join(root, ".runner"), &st); err != nil {
		return st, fmt.Errorf("the runner is not configured: %w", err)
	}
	return st, nil
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// client talks to the GitHub stand-in only, on a loopback address, over http or over https with
// the stand-in's self-signed certificate (ghfake.NewTLS): this stand-in runner skips the
// certificate check that the real runner, and every Hangar binary, makes.
var client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
	TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // test stand-in, loopback only
}}
