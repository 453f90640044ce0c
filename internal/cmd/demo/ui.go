package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
	"golang.org/x/sys/unix"

	"github.com/hangar-ci/hangar/internal/testkit/browser"
	"github.com/hangar-ci/hangar/internal/testkit/localenv"
)

// uiPages are the pages the demo checks, with what each must show of the demo's stack.
func uiPages(e *localenv.Env) []struct{ path, shows string } {
	return []struct{ path, shows string }{
		{"/", `id="pool-` + e.Pool + `"`},
		{"/runs?since=1h", `class="lane"`},
		{"/cost?since=1h", `class="cost-bar" data-key="` + localenv.Repo + `"`},
	}
}

// showUI starts hangar ui on the demo's stack and prints its address; it checks that every page
// answers with the demo's data, saves screenshots when HANGAR_DEMO_SCREENSHOTS names a folder
// (docs/images is made so), and, when a person runs the demo at a terminal, keeps serving until
// they press Enter (ten minutes at most), since the stack is removed when the demo ends.
func showUI(ctx context.Context, e *localenv.Env, bin string) error {
	say("hangar ui: the same views as a web page on this machine (docs/operations.md)")
	cmd := exec.Command(bin, "ui", "--stack", e.Stack, "--addr", "127.0.0.1:0")
	cmd.Env = e.Environ()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start hangar ui: %w", err)
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}()
	line, err := firstLine(ctx, out, time.Minute)
	if err != nil {
		return fmt.Errorf("hangar ui: %w", err)
	}
	addr := line[strings.LastIndex(line, " ")+1:]
	fmt.Printf("    %s\n", line)
	if err := checkPages(ctx, addr, uiPages(e)); err != nil {
		return err
	}
	fmt.Printf("    checked: the pools, the runs' timelines and the cost chart show the demo's stack\n")
	if dir := os.Getenv("HANGAR_DEMO_SCREENSHOTS"); dir != "" {
		if err := screenshots(ctx, addr, dir, e); err != nil {
			return err
		}
	}
	if _, err := unix.IoctlGetTermios(int(os.Stdin.Fd()), unix.TCGETS); err == nil { // a terminal
		fmt.Printf("    open %s in a browser on this machine; press Enter to end the demo (and its stack)\n", addr)
		wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		defer cancel()
		entered := make(chan struct{})
		go func() {
			_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
			close(entered)
		}()
		select {
		case <-entered:
		case <-wctx.Done():
		}
	}
	return nil
}

// firstLine reads the first line r writes, within d.
func firstLine(ctx context.Context, r io.Reader, d time.Duration) (string, error) {
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(r)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	select {
	case l, ok := <-lines:
		if !ok {
			return "", errors.New("it printed no address")
		}
		return l, nil
	case <-time.After(d):
		return "", fmt.Errorf("no address printed within %s", d)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// checkPages gets each page as a browser would (the token, then its cookie).
func checkPages(ctx context.Context, addr string, pages []struct{ path, shows string }) error {
	jar, err := cookiejar.New(nil)
	if err != nil {
		return err
	}
	// A browser resolves hangar ui's *.localhost name to loopback itself (RFC 6761); Go's resolver
	// asks DNS, so the demo dials loopback for it.
	loopback := &http.Transport{DialContext: func(ctx context.Context, network, address string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(address)
		if err == nil && strings.HasSuffix(host, ".localhost") {
			address = net.JoinHostPort("127.0.0.1", port)
		}
		return (&net.Dialer{}).DialContext(ctx, network, address)
	}}
	client := &http.Client{Jar: jar, Timeout: time.Minute, Transport: loopback}
	base := strings.SplitN(addr, "/?", 2)[0]
	for k, p := range pages {
		u := base + p.path
		if k == 0 {
			u = addr // the printed address: its token becomes the cookie
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		res, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("hangar ui %s: %w", p.path, err)
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			return err
		}
		if res.StatusCode != http.StatusOK || !strings.Contains(string(body), p.shows) {
			return fmt.Errorf("hangar ui %s: status %d, want 200 and a page showing %s", p.path, res.StatusCode, p.shows)
		}
	}
	return nil
}

// screenshots saves each page as Chromium draws it (headless) into dir.
func screenshots(ctx context.Context, addr, dir string, e *localenv.Env) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	data, err := os.MkdirTemp("", "hangar-demo-chromium-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(data)
	bctx, cancel, err := browser.Start(ctx, data, 1200, 800)
	if err != nil {
		return fmt.Errorf("screenshots: %w", err)
	}
	defer cancel()
	base := strings.SplitN(addr, "/?", 2)[0]
	if err := chromedp.Do(bctx, chromedp.Navigate(addr), chromedp.WaitVisible(chromedp.CSS("#pool-"+e.Pool))); err != nil {
		return fmt.Errorf("screenshots: %w", err)
	}
	for _, p := range []struct{ name, path, sel string }{
		{"ui-pools", "/", "#pool-" + e.Pool},
		{"ui-runs", "/runs?since=1h", ".lane"},
		{"ui-cost", "/cost?since=1h", "#cost-chart"},
	} {
		if err := chromedp.Do(bctx, chromedp.Navigate(base+p.path), chromedp.WaitVisible(chromedp.CSS(p.sel))); err != nil {
			return fmt.Errorf("screenshot %s: %w", p.path, err)
		}
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			return fmt.Errorf("screenshot %s: %w", p.path, err)
		}
		if err := os.WriteFile(filepath.Join(dir, p.name+".png"), png, 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("    screenshots of each page in %s\n", dir)
	return nil
}
