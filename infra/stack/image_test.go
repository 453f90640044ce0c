package stack_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// stockImage is a stock image as far as image.sh can tell: a PATH of stand-in programs (each
// records its arguments), library directories, and nothing else.
type stockImage struct {
	bin, lib, calls string
}

func newStockImage(t *testing.T, programs ...string) *stockImage {
	t.Helper()
	base := t.TempDir()
	im := &stockImage{bin: filepath.Join(base, "bin"), lib: filepath.Join(base, "lib"), calls: filepath.Join(base, "calls")}
	require.NoError(t, os.Mkdir(im.bin, 0o755))
	require.NoError(t, os.Mkdir(im.lib, 0o755))
	for _, p := range programs {
		im.program(t, p, "")
	}
	// What the apt branch pipes through, from this machine.
	for _, tool := range []string{"grep", "sort", "tail"} {
		path, err := exec.LookPath(tool)
		require.NoError(t, err)
		require.NoError(t, os.Symlink(path, filepath.Join(im.bin, tool)))
	}
	return im
}

// program adds a stand-in that records its name and arguments, then prints out.
func (im *stockImage) program(t *testing.T, name, out string) {
	t.Helper()
	script := "#!/bin/bash\necho \"" + name + " $*\" >>" + im.calls + "\nprintf '%s' '" + out + "'\n"
	require.NoError(t, os.WriteFile(filepath.Join(im.bin, name), []byte(script), 0o755))
}

// run runs image.sh as the user data does (bash, set -euo pipefail) and returns what the
// stand-ins were asked, and the script's output.
func (im *stockImage) run(t *testing.T) ([]string, string, error) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	require.NoError(t, err)
	cmd := exec.Command(bash, "-c", "set -euo pipefail; source image.sh")
	cmd.Env = []string{"PATH=" + im.bin, "HANGAR_IMAGE_LIBDIRS=" + im.lib}
	out, err := cmd.CombinedOutput()
	b, _ := os.ReadFile(im.calls)
	var calls []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" {
			calls = append(calls, l)
		}
	}
	return calls, string(out), err
}

// TestImageScriptInstallsWhatIsMissing: on a stock Amazon Linux 2023 (dnf) or Ubuntu 24.04
// (apt, the AWS CLI as a snap) the user data installs each piece of the image contract the image
// lacks, and only those; a baked image installs nothing; an image with neither package manager
// fails, naming what it lacks. The local world cannot show the real repositories: the package
// managers are stand-ins that record what they were asked.
func TestImageScriptInstallsWhatIsMissing(t *testing.T) {
	t.Parallel()
	al := newStockImage(t, "dnf", "aws") // AL2023 has the AWS CLI
	calls, out, err := al.run(t)
	require.NoError(t, err, out)
	require.Equal(t, []string{"dnf install -y -q git iptables-nft libicu"}, calls)

	ubuntu := newStockImage(t, "apt-get", "git", "snap") // Ubuntu has git, and no AWS CLI
	ubuntu.program(t, "apt-cache", "libicu-dev\nlibicu74\nlibicu72\n")
	calls, out, err = ubuntu.run(t)
	require.NoError(t, err, out)
	require.Equal(t, []string{"apt-get update -qq", "apt-cache pkgnames libicu", "apt-get install -y -qq iptables libicu74", "snap install aws-cli --classic"}, calls)

	baked := newStockImage(t, "dnf", "git", "iptables", "aws")
	require.NoError(t, os.WriteFile(filepath.Join(baked.lib, "libicuuc.so.74"), []byte("elf"), 0o644))
	calls, out, err = baked.run(t)
	require.NoError(t, err, out)
	require.Empty(t, calls, "nothing to install")

	none := newStockImage(t, "git", "aws")
	_, out, err = none.run(t)
	require.Error(t, err)
	require.Contains(t, out, "no dnf or apt-get to install iptables icu with: bake them into the image")
}
