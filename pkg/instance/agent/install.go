package agent

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
)

// ErrChecksum is returned when a downloaded runner does not match its published SHA-256.
var ErrChecksum = errors.New("runner checksum mismatch")

// runnerInstalled reports whether dir holds a runner (config.sh and run.sh).
func runnerInstalled(dir string) bool {
	for _, f := range []string{"config.sh", "run.sh"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.IsDir() {
			return false
		}
	}
	return true
}

// RunnerURL returns where release version of the runner for arch is downloaded from.
func RunnerURL(r pooldoc.Runner, arch string) string {
	return fmt.Sprintf("%s/v%s/actions-runner-linux-%s-%s.tar.gz", strings.TrimRight(r.BaseURL, "/"), r.Version, arch, r.Version)
}

// installRunner makes sure dir holds a runner: one baked into the AMI is used as it is;
// otherwise the pool's release is downloaded, checked against its SHA-256 before anything is
// unpacked, and unpacked into dir.
func installRunner(ctx context.Context, client *http.Client, r pooldoc.Runner, arch, dir string) (string, error) {
	if runnerInstalled(dir) {
		return "runner found in " + dir + " (baked into the image)", nil
	}
	if r.Version == "" {
		return "", fmt.Errorf("no runner in %s and the pool names no runner version to download", dir)
	}
	want := r.SHA256[arch]
	if want == "" {
		return "", fmt.Errorf("the pool publishes no SHA-256 for the %s runner: refusing to run an unverified download", arch)
	}
	url := RunnerURL(r, arch)
	tmp, err := os.CreateTemp("", "actions-runner-*.tar.gz")
	if err != nil {
		return "", fmt.Errorf("download runner: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", fmt.Errorf("download runner %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("download runner %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("download runner %s: %s", url, resp.Status)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), resp.Body)
	if err != nil {
		return "", fmt.Errorf("download runner %s: %w", url, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return "", fmt.Errorf("%w: %s has SHA-256 %s, the pool publishes %s", ErrChecksum, url, got, want)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("install runner: %w", err)
	}
	if err := untar(tmp, dir); err != nil {
		return "", fmt.Errorf("unpack runner %s: %w", url, err)
	}
	return fmt.Sprintf("runner %s (%d bytes, SHA-256 verified) unpacked into %s", url, n, dir), nil
}

// untar unpacks a gzipped tarball into dir through an os.Root: no entry, and no symlink an
// earlier entry made, can lead a write outside dir. Symlinks must point inside dir too.
func untar(r io.Reader, dir string) error {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return err
	}
	defer gz.Close()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer func() { _ = root.Close() }()
	tr := tar.NewReader(gz)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(hdr.Name)
		if !filepath.IsLocal(name) {
			return fmt.Errorf("entry %q would land outside %s", hdr.Name, dir)
		}
		if err := untarEntry(root, tr, hdr, name); err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
	}
}

func untarEntry(root *os.Root, tr *tar.Reader, hdr *tar.Header, name string) error {
	switch hdr.Typeflag {
	case tar.TypeDir:
		return root.MkdirAll(name, 0o755)
	case tar.TypeReg:
		if err := root.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			return err
		}
		f, err := root.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(hdr.Mode)&0o755)
		if err != nil {
			return err
		}
		_, err = io.Copy(f, io.LimitReader(tr, 2<<30))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	case tar.TypeSymlink:
		if filepath.IsAbs(hdr.Linkname) || !filepath.IsLocal(filepath.Join(filepath.Dir(name), hdr.Linkname)) {
			return fmt.Errorf("symlink to %q would point outside the runner directory", hdr.Linkname)
		}
		return root.Symlink(hdr.Linkname, name)
	}
	return fmt.Errorf("unsupported type %q", hdr.Typeflag)
}

// downloadClient is the HTTP client for runner downloads: a download may take minutes, but a
// stalled connection must not hang init forever.
func downloadClient() *http.Client {
	return &http.Client{Timeout: 15 * time.Minute}
}
