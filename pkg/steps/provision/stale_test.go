package provision_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hangar-ci/hangar/internal/testkit/fakerunner"
	"github.com/hangar-ci/hangar/internal/testkit/localenv"
	"github.com/hangar-ci/hangar/internal/testkit/testbuild"
)

// registerStale registers a runner with the stand-in's config.sh and leaves it offline. Like
// every Hangar runner it carries its run's id (the name's last part) as a label.
func registerStale(t *testing.T, e *env, token, name string) {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, fakerunner.Install(dir, testbuild.Binary(t, "github.com/hangar-ci/hangar/internal/testkit/cmd/fake-runner")))
	out, err := exec.Command(filepath.Join(dir, "config.sh"), "--unattended", "--url", e.GH.URL()+"/"+localenv.Repo,
		"--token", token, "--name", name, "--labels", name[strings.LastIndex(name, "-")+1:], "--no-default-labels").CombinedOutput()
	require.NoError(t, err, "%s", out)
}
