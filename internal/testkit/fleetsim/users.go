package fleetsim

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// RunnerUserPrefix names the unprivileged users the test bed creates for simulated instances'
// runners (hangar-run-01, hangar-run-02, …): scripts/testbed.sh makes them.
const RunnerUserPrefix = "hangar-run-"

// maxRunnerUsers is how many the simulator looks for.
const maxRunnerUsers = 99

// lockDir holds one lock file per runner user; a simulator (in any process on the machine)
// holds the lock of each user it lent to an instance, so that no two simulated instances share a
// user: each agent kills every process of its user after a run and must not reach another's.
var lockDir = filepath.Join(os.TempDir(), "hangar-testbed-users")

// runnerUser is a test bed user lent to one simulated instance for its life.
type runnerUser struct {
	name string
	uid  int
	lock *os.File
}

// claimUser lends a free runner user, after clearing what an earlier holder may have left
// (firewall rules of its uid).
func claimUser() (*runnerUser, error) {
	if err := os.MkdirAll(lockDir, 0o755); err != nil {
		return nil, fmt.Errorf("runner users: %w", err)
	}
	found := 0
	for i := 1; i <= maxRunnerUsers; i++ {
		name := fmt.Sprintf("%s%02d", RunnerUserPrefix, i)
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		found++
		uid, err := strconv.Atoi(u.Uid)
		if err != nil {
			continue
		}
		f, err := os.OpenFile(filepath.Join(lockDir, name+".lock"), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			return nil, fmt.Errorf("runner users: %w", err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		ru := &runnerUser{name: name, uid: uid, lock: f}
		ru.clearFirewall()
		return ru, nil
	}
	if found == 0 {
		return nil, errors.New("no runner users (" + RunnerUserPrefix + "01, …) on this machine: make testbed-up creates them")
	}
	return nil, fmt.Errorf("all %d runner users of the test bed are lent to running instances", found)
}

// release gives the user back.
func (u *runnerUser) release() {
	if u == nil || u.lock == nil {
		return
	}
	u.clearFirewall()
	_ = u.lock.Close() // and with it the lock
	u.lock = nil
}

// clearFirewall deletes the OUTPUT rules the agent added for this user, by their exact spec.
func (u *runnerUser) clearFirewall() {
	clearFirewallMatching("--uid-owner " + strconv.Itoa(u.uid) + " ")
}

// clearFirewallMatching deletes the OUTPUT rules whose spec holds match, by their exact spec.
func clearFirewallMatching(match string) {
	out, err := exec.Command("iptables", "-w", "-S", "OUTPUT").Output()
	if err != nil {
		return // no iptables: no rules either
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "-A OUTPUT ") || !strings.Contains(line+" ", match) {
			continue
		}
		spec, err := splitRule(strings.TrimPrefix(line, "-A "))
		if err != nil {
			continue
		}
		_ = exec.Command("iptables", append([]string{"-w", "-D"}, spec...)...).Run()
	}
}

// splitRule splits an iptables -S line into arguments, honouring double quotes.
func splitRule(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	quoted, in := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, in = !quoted, true
		case r == ' ' && !quoted:
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if quoted {
		return nil, fmt.Errorf("unbalanced quotes in %q", s)
	}
	if in {
		out = append(out, cur.String())
	}
	return out, nil
}
