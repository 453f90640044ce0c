package fakerunner

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/hangar-ci/hangar/internal/testkit/ghfake"
)

// runJIT runs the just-in-time runner that encoded (the stand-in's encoded_jit_config, see
// ghfake.JITConfig) describes, as `run.sh --jitconfig` does: no .runner or .credentials file is
// read or written; the runner goes online, takes exactly one job, reports it, goes offline and
// returns. Stopped (ctx) before a job arrives, it goes offline and returns nil. A session the
// server refuses (the configuration was used before, or its runner is gone) is an error carrying
// the server's message.
func runJIT(ctx context.Context, root, encoded string, out io.Writer) error {
	cfg, err := ghfake.DecodeJITConfig(encoded)
	if err != nil {
		return fmt.Errorf("--jitconfig: %w", err)
	}
	work := cfg.Work
	if work == "" {
		work = "_work"
	}
	if !filepath.IsAbs(work) {
		work = filepath.Join(root, work)
	}
	st := settings{ID: cfg.ID, Name: cfg.Name, Labels: cfg.Labels, URL: cfg.URL, Work: work}
	fmt.Fprintf(out, "Just-in-time runner %s (id %d) for %s\n", cfg.Name, cfg.ID, cfg.URL)
	return (&session{st: st, auth: "Runner " + cfg.Credential, once: true, out: out}).listen(ctx)
}
