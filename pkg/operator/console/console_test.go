package console

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
	"github.com/hangar-ci/hangar/pkg/operator"
)

var t0 = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

// view is a View of fixed answers; it records the windows it was asked for.
type view struct {
	windows []operator.Window
	by      []string
}

func (v *view) Status(context.Context, ...string) ([]operator.PoolStatus, error) {
	return []operator.PoolStatus{{Pool: "linux-x64", Idle: 3, Running: 1, Live: 4, OnSpec: 4, SpecHash: "abc", Offers: 3,
		Target: pooldoc.Target{Schedule: "default", Hot: 3}}, {Pool: "gpu", Drained: true, DeadLetters: 2}}, nil
}

func (v *view) Runs(_ context.Context, w operator.Window) ([]operator.RunSummary, error) {
	v.windows = append(v.windows, w)
	return []operator.RunSummary{{Run: "700", Attempt: 1, Repo: "acme/app", Pools: []string{"linux-x64"}, Instances: 2, Reused: 1, Created: 1,
		Started: t0.Add(-10 * time.Minute), Ended: t0, Outcome: "released", Cost: 0.0123, PriceUnknown: 1,
		Held: []operator.Held{
			{InstanceID: "i-0aaaaaaaaaaaaaaaa", Claimed: true, AssignedAt: t0.Add(-10 * time.Minute), Registered: t0.Add(-9 * time.Minute), EndedAt: t0.Add(-5 * time.Minute), Outcome: "idle", PriceKnown: true, Cost: 0.0123},
			{InstanceID: "i-0bbbbbbbbbbbbbbbb", AssignedAt: t0.Add(-10 * time.Minute), EndedAt: t0, Outcome: "terminated", Reason: "its agent did not deregister within 2m0s"},
		}}, {Run: "j17", Repo: "acme/app", Pools: []string{"linux-x64"}, Instances: 1, Reused: 1, Started: t0.Add(-3 * time.Minute), Ended: t0, Outcome: "released",
		Job:  &operator.JobView{ID: 17, Name: "<b>build</b>", Workflow: "ci", URL: "https://github.com/acme/app/actions/runs/5/job/17", TookJob: 18},
		Held: []operator.Held{{InstanceID: "i-0cccccccccccccccc", Claimed: true, AssignedAt: t0.Add(-3 * time.Minute), EndedAt: t0, Outcome: "idle"}}},
		{Run: "j19", Repo: "acme/app", Pools: []string{"linux-x64"}, Instances: 1, Started: t0.Add(-2 * time.Minute), Outcome: "running",
			Job:  &operator.JobView{ID: 19, Name: "lint", URL: "javascript:alert(1)", TookJob: 19},
			Held: []operator.Held{{InstanceID: "i-0dddddddddddddddd", AssignedAt: t0.Add(-2 * time.Minute), Outcome: "running"}}}}, nil
}

func (v *view) Instance(_ context.Context, id string) (*operator.InstanceReport, error) {
	if id != "i-0aaaaaaaaaaaaaaaa" {
		return nil, fmt.Errorf("%w: %w: instance %s: not in stack s's table", operator.ErrBadInput, operator.ErrUnknown, id) // as operator.Instance's matches
	}
	return &operator.InstanceReport{ID: id, Pool: "linux-x64", State: "claimed", Signal: "REGISTER_FAILED",
		LogTail: "pre-runner: <script>alert(1)</script>\n\x1b[31mred\x1b[0m\n"}, nil
}

func (v *view) Cost(_ context.Context, by string, w operator.Window) ([]operator.CostRow, error) {
	v.windows, v.by = append(v.windows, w), append(v.by, by)
	if by == "team" {
		return nil, fmt.Errorf("%w: --by %q: want repository, pool, run or day", operator.ErrBadInput, by)
	}
	return []operator.CostRow{{Key: "acme/app", Cost: 2}, {Key: "acme/<b>lib</b>", Cost: 0.5, UnknownHours: 1}}, nil
}

const token = "0123456789abcdef0123456789abcdef-token"

func newConsole(t *testing.T) (*Console, *view, string) {
	t.Helper()
	v := &view{}
	c, err := New(v, Config{Stack: "hangar", Host: "127.0.0.1:4000", Token: token, Now: func() time.Time { return t0 },
		Log: nil})
	require.NoError(t, err)
	return c, v, "hangar_ui"
}

// get requests path as a browser holding the token would (cookie), unless anon.
func get(t *testing.T, c http.Handler, method, path, host string, cookie bool) (*httptest.ResponseRecorder, string) {
	t.Helper()
	r := httptest.NewRequest(method, path, nil)
	r.Host = host
	if cookie {
		r.AddCookie(&http.Cookie{Name: "hangar_ui", Value: token})
	}
	w := httptest.NewRecorder()
	c.ServeHTTP(w, r)
	return w, w.Body.String()
}

func TestGuard(t *testing.T) {
	c, _, name := newConsole(t)
	for _, tc := range []struct {
		name, method, path, host string
		cookie                   bool
		status                   int
		says                     string
	}{
		{"no token", "GET", "/", "127.0.0.1:4000", false, http.StatusUnauthorized, "no token: open the address hangar ui printed"},
		{"wrong token", "GET", "/?token=guess", "127.0.0.1:4000", false, http.StatusUnauthorized, "is not this hangar ui&#39;s"},
		{"another host (DNS rebinding)", "GET", "/", "evil.example:4000", true, http.StatusMisdirectedRequest, "answers only at 127.0.0.1:4000"},
		{"a write", "POST", "/", "127.0.0.1:4000", true, http.StatusMethodNotAllowed, "it answers GET"},
		{"the cookie", "GET", "/", "127.0.0.1:4000", true, http.StatusOK, "linux-x64"},
		{"unknown page", "GET", "/admin", "127.0.0.1:4000", true, http.StatusNotFound, "no page at /admin"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, body := get(t, c, tc.method, tc.path, tc.host, tc.cookie)
			require.Equal(t, tc.status, res.Code, body)
			require.Contains(t, body, tc.says)
			require.Equal(t, contentSecurity, res.Header().Get("Content-Security-Policy"), "every answer forbids scripts")
			require.Equal(t, "no-store", res.Header().Get("Cache-Control"))
			if tc.status != http.StatusOK {
				require.NotContains(t, body, "linux-x64", "nothing of the stack without the token")
			}
		})
	}

	t.Run("the token in the address becomes a cookie and leaves the address", func(t *testing.T) {
		res, _ := get(t, c, "GET", "/runs?since=1d&token="+url.QueryEscape(token), "127.0.0.1:4000", false)
		require.Equal(t, http.StatusSeeOther, res.Code)
		require.Equal(t, "/runs?since=1d", res.Header().Get("Location"))
		var ck *http.Cookie
		result := res.Result()
		defer result.Body.Close()
		for _, k := range result.Cookies() {
			if k.Name == name {
				ck = k
			}
		}
		require.NotNil(t, ck)
		require.Equal(t, token, ck.Value)
		require.True(t, ck.HttpOnly)
		require.Equal(t, http.SameSiteStrictMode, ck.SameSite)
	})

	t.Run("the redirect stays on this host", func(t *testing.T) {
		res, _ := get(t, c, "GET", "//evil.example/x?token="+url.QueryEscape(token), "127.0.0.1:4000", false)
		require.Equal(t, http.StatusSeeOther, res.Code)
		require.Equal(t, "/", res.Header().Get("Location"))
	})
}

func TestPages(t *testing.T) {
	c, v, _ := newConsole(t)
	host := "127.0.0.1:4000"

	res, body := get(t, c, "GET", "/", host, true)
	require.Equal(t, http.StatusOK, res.Code)
	require.Contains(t, body, `<section class="pool card" id="pool-linux-x64"`)
	require.Contains(t, body, `<rect class="idle" x="0.0" y="0" width="360.0" height="22"><title>3 idle</title></rect>`, "3 of 4 instances idle: three quarters of the bar")
	require.Contains(t, body, `<span class="badge drained">drained</span>`)
	require.Contains(t, body, "2 (offers no claimer could read")
	require.NotContains(t, body, "<script")

	res, body = get(t, c, "GET", "/runs?since=2d&repo=acme/app", host, true)
	require.Equal(t, http.StatusOK, res.Code)
	require.Equal(t, operator.Window{Since: t0.Add(-48 * time.Hour), Until: t0, Repo: "acme/app"}, v.windows[len(v.windows)-1])
	require.Contains(t, body, `<option value="2d" selected>2d</option>`, "a window outside the choices stays chosen")
	require.Contains(t, body, `claimed 1m0s → running 4m0s → returned to the pool (idle)`)
	require.Contains(t, body, `created 10m0s → terminated (its agent did not deregister within 2m0s)`, "never registered: waiting to the end")
	require.Contains(t, body, `<circle class="terminated" cx="480.0"`)
	require.Contains(t, body, `<a class="instance" href="/instances/i-0aaaaaaaaaaaaaaaa">`)
	require.Contains(t, body, "$0.012300 &#43; 1 price unknown")
	// A label-routed job shows as a job: its page on GitHub, its workflow and name, and what
	// became of its runner; what the payload named is text, and only a web address is a link.
	require.Contains(t, body, `<h2>job <a class="job" href="https://github.com/acme/app/actions/runs/5/job/17">17</a> <span class="attempt">ci / &lt;b&gt;build&lt;/b&gt;</span>`)
	require.Contains(t, body, `<dd class="ran">its runner ran job 18 instead (the job got another)</dd>`)
	require.Contains(t, body, `<dd class="ran">its runner ran it</dd>`)
	require.NotContains(t, body, "javascript:")

	res, body = get(t, c, "GET", "/instances/i-0aaaaaaaaaaaaaaaa", host, true)
	require.Equal(t, http.StatusOK, res.Code)
	require.Contains(t, body, "pre-runner: &lt;script&gt;alert(1)&lt;/script&gt;", "what a job wrote is text, never markup")
	require.NotContains(t, body, "<script>")

	res, body = get(t, c, "GET", "/cost?by=pool&since=7d", host, true)
	require.Equal(t, http.StatusOK, res.Code)
	require.Equal(t, "pool", v.by[len(v.by)-1])
	require.Contains(t, body, `<rect class="spend" x="260" y="4.0" width="420.0" height="18"/>`, "the most expensive is the longest bar")
	require.Contains(t, body, `<rect class="spend" x="260" y="30.0" width="105.0" height="18"/>`, "a quarter of the cost, a quarter of the bar")
	require.Contains(t, body, "acme/&lt;b&gt;lib&lt;/b&gt;")
	require.Contains(t, body, `<strong id="total">$2.50</strong>`)
	require.Contains(t, body, `href="/cost?by=repository&amp;since=7d"`)

	for _, tc := range []struct {
		path   string
		status int
		says   string
	}{
		{"/runs?since=a+month", http.StatusBadRequest, "--since &#34;a month&#34;: want a duration like 30d, 12h or 90m, or a date like 2026-11-01"},
		{"/cost?repo=app", http.StatusBadRequest, "--repo &#34;app&#34;: want owner/name"},
		{"/cost?by=team", http.StatusBadRequest, "--by &#34;team&#34;: want repository, pool, run or day"},
		{"/instances/i-0fffffffffffffff0", http.StatusNotFound, "instance i-0fffffffffffffff0: not in stack"},
	} {
		res, body := get(t, c, "GET", tc.path, host, true)
		require.Equal(t, tc.status, res.Code, tc.path)
		require.Contains(t, body, tc.says, tc.path)
	}
}

func TestTimelineOfARunStillGoing(t *testing.T) {
	run := operator.RunSummary{Started: t0.Add(-time.Minute), Held: []operator.Held{
		{InstanceID: "i-1", Claimed: true, AssignedAt: t0.Add(-time.Minute), Registered: t0.Add(-30 * time.Second), Outcome: "running"},
	}}
	tl := newTimeline(run, t0)
	require.Len(t, tl.Lanes, 1)
	l := tl.Lanes[0]
	require.False(t, l.Ended)
	require.Equal(t, []segment{
		{Class: "waiting", X: 0, W: 240, Title: "claimed, waiting for its runner: 30.0 s"},
		{Class: "running", X: 240, W: 240, Title: "running the run's jobs: 30.0 s"},
	}, l.Segments)
	require.Equal(t, "claimed 30.0 s → running 30.0 s → still running", l.Caption)
	require.Equal(t, "price unknown", l.Cost)
	require.Equal(t, "1m0s", tl.Span)
}

func TestConfigNamesTheBadField(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Host: "127.0.0.1:1", Token: token}, "Config.Stack is empty"},
		{Config{Stack: "s", Token: token}, "Config.Host is empty"},
		{Config{Stack: "s", Host: "127.0.0.1:1", Token: "short"}, "Config.Token has 5 characters: want at least 32"},
	} {
		_, err := New(&view{}, tc.cfg)
		require.ErrorContains(t, err, tc.want)
	}
	require.Len(t, NewToken(), 43)
	require.NotEqual(t, NewToken(), NewToken())
	require.True(t, strings.HasPrefix(contentSecurity, "default-src 'none'"))
}
