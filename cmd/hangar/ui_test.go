package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/browser"
	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbed"
	"github.com/hangar-ci/hangar/pkg/operator"
)

// TestUI drives hangar ui in headless Chromium on the world of TestOperatorCommands: each page
// as a person sees it (the browser's rendered text and the sizes of what it drew), with a
// screenshot of each under the test's artifacts (go test -artifacts keeps them).
func TestUI(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	browser := chromium(t)
	addr := startUI(t, w)
	shots := screenshotDir(t)
	shoot := func(t *testing.T, ctx context.Context, name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644))
	}
	// text is what a person reads in an element (its rendered text; an SVG element's content).
	text := func(t *testing.T, ctx context.Context, sel string) string {
		t.Helper()
		get := chromedp.Text(chromedp.CSS(sel))
		if strings.HasPrefix(sel, "#cost-chart") {
			get = chromedp.TextContent(chromedp.CSS(sel))
		}
		s, err := chromedp.Run(ctx, get)
		require.NoError(t, err, sel)
		return s
	}
	width := func(t *testing.T, ctx context.Context, sel string) float64 {
		t.Helper()
		box, err := chromedp.Run(ctx, chromedp.Dimensions(chromedp.CSS(sel)))
		require.NoError(t, err, sel)
		return float64(box.Width)
	}
	count := func(t *testing.T, ctx context.Context, sel string) int {
		t.Helper()
		nodes, err := chromedp.Run(ctx, chromedp.Nodes(chromedp.CSSAll(sel), chromedp.AtLeast(0)))
		require.NoError(t, err, sel)
		return len(nodes)
	}
	ctx := browser

	t.Run("the printed address lets the browser in, then the pools", func(t *testing.T) {
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(addr), chromedp.WaitVisible(chromedp.CSS("#pool-"+w.e.Pool))))
		loc, err := chromedp.Run(ctx, chromedp.Location())
		require.NoError(t, err)
		require.NotContains(t, loc, "token=", "the token leaves the address bar")
		require.Equal(t, "6\t1\t1\t1\t2\t2\t13", text(t, ctx, "#pool-"+w.e.Pool+" .pool-counts"), "idle, stopped, warming, booting, claimed, running, live")
		require.Equal(t, "13 of 13 live instances run spec "+w.e.Doc.SpecHash, text(t, ctx, "#pool-"+w.e.Pool+" .rollout"))
		require.Contains(t, text(t, ctx, "#pool-linux-arm .dead-letters"), "1 (offers no claimer could read")
		require.Equal(t, "0 of 1 live instances run spec "+w.arm.SpecHash, text(t, ctx, "#pool-linux-arm .rollout"))
		// The bar of instances by state: idle is 6 of 13 of the bar's 480 units.
		require.InDelta(t, 480.0*6/13, width(t, ctx, "#pool-"+w.e.Pool+" svg.bar rect.idle"), 1.5)
		shoot(t, ctx, "pools")
	})

	t.Run("another listener on this machine never gets the token", func(t *testing.T) {
		// Another user's server on 127.0.0.1, which the operator's browser visits (or a page
		// sends it to): browsers share a host's cookies across its ports.
		heard := make(chan string, 10)
		other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			heard <- r.Host + " " + r.Header.Get("Cookie")
			_, _ = w.Write([]byte("<p id=other>other</p>"))
		}))
		defer other.Close()
		port := other.Listener.Addr().(*net.TCPAddr).Port
		token := addr[strings.Index(addr, "token=")+len("token="):]
		for _, host := range []string{"127.0.0.1", "localhost"} {
			u := fmt.Sprintf("http://%s:%d/", host, port)
			require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(u), chromedp.WaitVisible(chromedp.CSS("#other"))), u)
			got := <-heard
			require.NotContains(t, got, token, "%s got hangar ui's token", u)
			require.NotContains(t, got, "hangar_ui", u)
		}
		uiPort := addr[strings.LastIndex(addr, ":")+1 : strings.Index(addr, "/?")]
		_, err := net.Listen("tcp6", "[::1]:"+uiPort)
		require.Error(t, err, "nor can it take hangar ui's port on ::1, which the browser may try first")
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(strings.SplitN(addr, "?", 2)[0]), chromedp.WaitVisible(chromedp.CSS("#pool-"+w.e.Pool))),
			"the console still knows the browser")
	})

	t.Run("runs: each run's instances on a timeline", func(t *testing.T) {
		require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`header nav a[href="/runs"]`)), chromedp.WaitVisible(chromedp.CSS("#run-705-1"))))
		require.Equal(t, 2, count(t, ctx, "#run-705-1 .lane"), "run 705 held two instances")
		for _, sel := range []string{"#run-705-1 .lane:nth-of-type(2)", "#run-705-1 .lane:nth-of-type(3)"} {
			caption := text(t, ctx, sel+" .caption")
			require.Regexp(t, `^claimed [0-9.]+ s → running [0-9.]+ s → returned to the pool \(idle\)$`, caption)
			require.Positive(t, width(t, ctx, sel+" rect.running"), "the running phase is drawn")
			require.Regexp(t, `^\$0\.0[0-9]{5}$`, text(t, ctx, sel+" .lane-cost"), "priced at launch")
		}
		require.Equal(t, 2, count(t, ctx, "#run-705-1 circle.returned"), "both given back: an end marker on each lane")
		require.Contains(t, text(t, ctx, "#run-704-1 .caption"), "→ terminated (spot interruption notice)")
		require.Equal(t, 1, count(t, ctx, "#run-704-1 circle.terminated"))
		require.Equal(t, "running", text(t, ctx, "#run-702-1 .outcome"))
		require.Equal(t, 3, count(t, ctx, "#run-702-1 .lane"))
		require.Contains(t, text(t, ctx, "#run-700-1 .cost"), "+ 1 price unknown")
		require.Equal(t, localenv.Repo, text(t, ctx, "#run-703-1 .repo"))
		shoot(t, ctx, "runs")
	})

	t.Run("an instance whose pre-runner script failed, from its run's timeline", func(t *testing.T) {
		require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#run-703-1 a.instance")), chromedp.WaitVisible(chromedp.CSS("pre.log-tail"))))
		require.Equal(t, "pre-runner: installing toolchain\npre-runner: curl: (6) could not resolve host\nhangar-agent: pre-runner script failed: exit status 6",
			strings.TrimSpace(text(t, ctx, "pre.log-tail")))
		require.Contains(t, text(t, ctx, ".signal"), "REGISTER_FAILED for run 703")
		require.Contains(t, text(t, ctx, "h1"), w.preRunner)
		shoot(t, ctx, "instance")

		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(strings.SplitN(addr, "?", 2)[0]+"instances/"+w.spot), chromedp.WaitVisible(chromedp.CSS(".ended"))))
		require.Equal(t, "spot interruption notice (its agent signalled SPOT_INTERRUPTED)", text(t, ctx, ".ended"))
	})

	t.Run("cost as a chart", func(t *testing.T) {
		require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`header nav a[href="/cost"]`)), chromedp.WaitVisible(chromedp.CSS("#cost-chart"))))
		require.Equal(t, 1, count(t, ctx, "#cost-chart g.cost-bar"), "one repository")
		require.Equal(t, localenv.Repo, text(t, ctx, "#cost-chart .label"))
		// The chart's amount is what hangar cost says (runs still going grow between the two
		// reads: the page's figure is at most the later one's).
		shown := parseDollars(t, text(t, ctx, "#cost-chart .amount"))
		require.Equal(t, text(t, ctx, "#total")+" +?", text(t, ctx, "#cost-chart .amount"), "the only bar is the total; some of its hours have no price")
		code, out, errOut := w.hangar(t, nil, "cost", "--since", "30d", "-o", "json")
		require.Equal(t, 0, code, errOut)
		var rows []operator.CostRow
		require.NoError(t, json.Unmarshal([]byte(out), &rows))
		require.Len(t, rows, 1)
		require.LessOrEqual(t, shown, rows[0].Cost+1e-6)
		require.Greater(t, shown, 0.0)
		// The largest group's bar spans the chart's bar area: 420 of its 790 units, as drawn
		// (the chart's box holds it unscaled: a border inside its height once shrank it).
		require.InDelta(t, 420.0/792, width(t, ctx, "#cost-chart rect.spend")/width(t, ctx, "#cost-chart"), 0.005)
		shoot(t, ctx, "cost-by-repository")

		require.NoError(t, chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`nav.tabs a[href*="by=pool"]`)), chromedp.WaitVisible(chromedp.CSS(`#cost-chart g.cost-bar[data-key="`+w.e.Pool+`"]`))))
		require.Equal(t, "Cost by pool", text(t, ctx, "h1"))
		shoot(t, ctx, "cost-by-pool")
	})

	t.Run("bad input is a page naming it", func(t *testing.T) {
		base := strings.SplitN(addr, "?", 2)[0]
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"runs?since=a+month"), chromedp.WaitVisible(chromedp.CSS("#problem"))))
		require.Contains(t, text(t, ctx, "#problem"), `--since "a month": want a duration like 30d, 12h or 90m, or a date like 2026-11-01`)
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"instances/i-0fffffffffffffff0"), chromedp.WaitVisible(chromedp.CSS("#problem"))))
		require.Contains(t, text(t, ctx, "#problem"), "404 Not Found")
	})
}

// screenshotDir is where the screenshots go: $HANGAR_TEST_OUTPUT/hangar-ui when set (make test
// sets it to .cache/test-output), else the test's artifact directory (kept by go test
// -artifacts).
func screenshotDir(t *testing.T) string {
	t.Helper()
	out := os.Getenv("HANGAR_TEST_OUTPUT")
	if out == "" {
		return t.ArtifactDir()
	}
	dir := filepath.Join(out, "hangar-ui")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	t.Cleanup(func() { t.Logf("screenshots of hangar ui in %s", dir) })
	return dir
}

// chromium starts a headless Chromium for the test (Debian's, which make testbed-up installs).
func chromium(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel, err := browser.Start(testbed.Context(t, 5*time.Minute), t.TempDir(), 1280, 900)
	require.NoError(t, err)
	t.Cleanup(cancel)
	return ctx
}

// startUI starts hangar ui on the world's stack and returns the address it printed.
func startUI(t *testing.T, w *world) string {
	t.Helper()
	cmd, lines, stderr := startHangar(t, append(w.e.Environ(), "HANGAR_STACK="+w.e.Stack), "ui", "--addr", "127.0.0.1:0")
	t.Cleanup(func() {
		require.NoError(t, cmd.Process.Signal(os.Interrupt))
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			require.NoError(t, err, "hangar ui stops cleanly on an interrupt: %s", stderr.String())
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			t.Errorf("hangar ui did not stop within a minute of an interrupt: %s", stderr.String())
		}
	})
	select {
	case line := <-lines:
		prefix := "hangar ui: stack " + w.e.Stack + " at "
		require.True(t, strings.HasPrefix(line, prefix), "%q; stderr %s", line, stderr.String())
		addr := strings.TrimPrefix(line, prefix)
		require.Regexp(t, `^http://hangar-[a-z2-7]{16}\.localhost:[0-9]+/\?token=[A-Za-z0-9_-]{43}$`, addr)
		return addr
	case <-time.After(2 * time.Minute):
		t.Fatalf("hangar ui printed no address in 2 minutes: %s", stderr.String())
	}
	return ""
}

func parseDollars(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(strings.TrimPrefix(strings.TrimSuffix(s, " +?"), "$"), 64)
	require.NoError(t, err, s)
	return v
}
