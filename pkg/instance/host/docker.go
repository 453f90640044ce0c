package host

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// dockerTimeout bounds each docker command.
const dockerTimeout = 2 * time.Minute

// cleanDocker removes every container, then every volume, network and image nothing uses any
// more, when the instance has the docker command (docker, its path; "" when it has none). Images
// go too: a run could have tagged a poisoned image under a name the next run pulls.
func cleanDocker(ctx context.Context, docker string, log *slog.Logger) error {
	if docker == "" {
		return nil // no Docker on this instance
	}
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, dockerTimeout)
		defer cancel()
		out, err := rootCommand(ctx, docker, args...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%s %s: %w: %s", docker, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return string(out), nil
	}
	if _, err := run("info", "--format", "{{.ID}}"); err != nil {
		// The CLI without a daemon: no run can have left anything in Docker.
		log.Info("docker is installed but no daemon answers; nothing to clean", "error", err)
		return nil
	}
	ids, err := run("ps", "-aq")
	if err != nil {
		return err
	}
	if ids := strings.Fields(ids); len(ids) > 0 {
		if _, err := run(append([]string{"rm", "-f", "-v"}, ids...)...); err != nil {
			return err
		}
	}
	if _, err := run("system", "prune", "--all", "--volumes", "--force"); err != nil {
		return err
	}
	log.Info("docker cleaned", "containers", len(strings.Fields(ids)))
	return nil
}
