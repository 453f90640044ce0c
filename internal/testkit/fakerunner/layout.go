package fakerunner

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
)

// BinaryName is where the stand-in binary sits inside a runner directory.
const BinaryName = "bin/fake-runner"

// Scripts are the stand-in config.sh and run.sh: thin wrappers over the binary, as the real
// scripts are over Runner.Listener. They find it from their own path ($0 without its last part:
// the agent starts them by absolute path) in the shell itself, without starting dirname: ten
// agents registering at once on the bench's two cores would otherwise start twenty more processes.
var Scripts = map[string]string{
	"config.sh": "#!/bin/sh\nexec \"${0%/*}/bin/fake-runner\" config \"$@\"\n",
	"run.sh":    "#!/bin/sh\nexec \"${0%/*}/bin/fake-runner\" run \"$@\"\n",
}

// Tarball returns a runner release tarball (config.sh, run.sh, bin/fake-runner) built around the
// stand-in binary at bin, and its SHA-256 in hex.
func Tarball(bin string) ([]byte, string, error) {
	exe, err := os.ReadFile(bin)
	if err != nil {
		return nil, "", fmt.Errorf("read stand-in runner binary: %w", err)
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	add := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: "bin/", Mode: 0o755, Typeflag: tar.TypeDir}); err != nil {
		return nil, "", err
	}
	for name, body := range Scripts {
		if err := add("./"+name, 0o755, []byte(body)); err != nil {
			return nil, "", err
		}
	}
	if err := add(BinaryName, 0o755, exe); err != nil {
		return nil, "", err
	}
	if err := tw.Close(); err != nil {
		return nil, "", err
	}
	if err := gz.Close(); err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(buf.Bytes())
	return buf.Bytes(), hex.EncodeToString(sum[:]), nil
}

// Install lays the stand-in out in dir as if baked into the AMI.
func Install(dir, bin string) error {
	exe, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		return err
	}
	for name, body := range Scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, BinaryName), exe, 0o755)
}
