//go:build !unix

package fakerunner

import (
	"os/exec"
	"time"
)

// killGroupOnCancel bounds the wait for a cancelled command's output; process groups are unix's.
func killGroupOnCancel(cmd *exec.Cmd) {
	cmd.WaitDelay = 5 * time.Second
}
