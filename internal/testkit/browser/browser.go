// Package browser starts Debian's Chromium, headless, for the pages of hangar ui: the browser
// test and the demo's screenshots drive it the same way.
package browser

import (
	"context"
	"errors"
	"os"
	"os/exec"

	"github.com/chromedp/chromedp"
)

// Start starts a headless Chromium (the chromium on PATH, which make testbed-up installs) with a
// window of width × height and its profile in dataDir, and returns a tab's context; cancel ends
// the browser. Background networking is off: this machine's network is closed.
func Start(ctx context.Context, dataDir string, width, height int) (context.Context, context.CancelFunc, error) {
	path, err := exec.LookPath("chromium")
	if err != nil {
		return nil, nil, errors.New("no chromium on PATH: make testbed-up installs Debian's chromium package")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.UserDataDir(dataDir),
		chromedp.WindowSize(width, height), chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium's sandbox refuses to run as root
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	tab, cancelTab := chromedp.NewContext(alloc)
	return tab, func() { cancelTab(); cancelAlloc() }, nil
}
