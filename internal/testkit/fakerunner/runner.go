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

// Main runs the stand-in runner with args (config ..., run, or config remove ...) in runner
// directory root, and returns the process exit code.
func Main(root string, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: fake-runner config|run ...")
		return 2
	}
	var err error
	switch {
	case args[0] == "config" && len(args) > 1 && args[1] == "remove":
		err = remove(root, args[2:], stdout)
	case args[0] == "config":
		err = configure(root, args[1:], stdout)
	case args[0] == "run":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		err = run(ctx, root, stdout)
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

func remove(root string, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("remove", flag.ContinueOnError)
	tok := fs.String("token", "", "")
	fs.Bool("unattended", false, "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	inputFromEnv(tok, "TOKEN")
	st, err := readSettings(root)
	if err != nil {
		return err
	}
	if *tok == "" {
		return errors.New("--token is required")
	}
	if err := post(st.URL, "/_fake/remove", "", ghfake.RemoveRequest{URL: st.URL, Token: *tok, ID: st.ID}, nil); err != nil {
		return err
	}
	for _, f := range []string{".runner", ".credentials"} {
		if err := os.Remove(filepath.Join(root, f)); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "√ Runner removed successfully\n√ Removed .credentials\n√ Removed .runner\n")
	return nil
}

func run(ctx context.Context, root string, out io.Writer) error {
	st, err := readSettings(root)
	if err != nil {
		return err
	}
	var cred credentials
	if err := readJSON(filepath.Join(root, ".credentials"), &cred); err != nil {
		return err
	}
	auth := "Runner " + cred.Credential
	status := func(s string) error {
		return post(st.URL, fmt.Sprintf("/_fake/runners/%d/status", st.ID), auth, map[string]string{"status": s}, nil)
	}
	if err := status("online"); err != nil {
		return err
	}
	fmt.Fprintf(out, "√ Connected to GitHub\nListening for Jobs\n")
	defer func() { _ = status("offline") }()
	for ctx.Err() == nil {
		var job ghfake.JobAssignment
		err := postCtx(ctx, st.URL, fmt.Sprintf("/_fake/runners/%d/next", st.ID), auth, struct{}{}, &job)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			fmt.Fprintln(out, "poll for jobs:", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		case job.ID == 0:
			continue
		}
		fmt.Fprintf(out, "Running job %d of %s\n", job.ID, job.Repo)
		res := runJob(ctx, st, job)
		if err := post(st.URL, fmt.Sprintf("/_fake/runners/%d/jobs/%d", st.ID, job.ID), auth, res, nil); err != nil {
			fmt.Fprintln(out, "report job:", err)
		}
		fmt.Fprintf(out, "Job %d completed with result: %s\n", job.ID, res.Conclusion)
	}
	return nil
}

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
		return fmt.Errorf("http response code: %d from 'POST %s': %s", resp.StatusCode, path, e.Message)
	}
	if out != nil && len(data) > 0 {
		return json.Unmarshal(data, out)
	}
	return nil
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
