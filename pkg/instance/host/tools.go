package host

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// Root runs only what root installed. Every program the agent starts as root (the firewall's
// iptables and ip6tables, docker, atq and atrm, ipcrm, sshd, systemctl, loginctl, unshare,
// journalctl, the helper) is resolved once, at Init, to
// an absolute path that only root can change: the program and every directory above it, every
// link on the way included, are root's and writable by no one else. Names are looked up on
// RootPATH alone, never the agent's inherited PATH, and Init fails when a directory on RootPATH
// is writable by anyone but root: a run could plant a program there that root would run next.
// What those programs start in turn finds RootPATH as its PATH.

// RootPATH is the search path of the programs the agent runs as root and the runner user's PATH:
// the system's directories.
const RootPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// rootPath is RootPATH (a variable for tests).
var rootPath = RootPATH

// maxLinks bounds the links followed resolving one path, as the kernel's 40.
const maxLinks = 40

// systemUIDMax is the highest uid of a system account (login.defs' SYS_UID_MAX). A program may
// be such an account's rather than root's (Debian's at is daemon's, setuid), but never the
// runner user's; directories must be root's.
const systemUIDMax = 999

// tools are the programs the agent runs as root, each an absolute path resolved by resolveTools;
// "" when the instance does not have it (the step that uses it is then skipped).
type tools struct {
	iptables, ip6tables, docker, atq, atrm, ipcrm string
	// sshd, systemctl and loginctl close the runner user's other doors (logins.go); unshare
	// proves the kernel refuses it user namespaces (userns.go); journalctl lets go of the
	// journals removed after a run (crashes.go).
	sshd, systemctl, loginctl, unshare, journalctl string
}

// resolveTools checks RootPATH's directories and resolves each program of cfg on it (a program
// given as an absolute path is checked where it is). iptables must be there unless the pool
// lets runs reach the metadata endpoint; the others are optional.
func resolveTools(cfg Config, u *runnerUser) (tools, error) {
	if err := checkRootPath(u); err != nil {
		return tools{}, err
	}
	var errs []error
	find := func(name string, required bool) string {
		p, err := resolveTool(name, u)
		switch {
		case err == nil:
			return p
		case errors.Is(err, exec.ErrNotFound) && !required:
			return ""
		}
		errs = append(errs, err)
		return ""
	}
	t := tools{
		iptables: find(cfg.Iptables, !cfg.Runner.MetadataAccess),
		docker:   find(cfg.Docker, false),
		atq:      find("atq", false),
		atrm:     find("atrm", false),
		ipcrm:    find("ipcrm", false),

		sshd:      find("sshd", false),
		systemctl: find("systemctl", false),
		loginctl:  find("loginctl", false),
		unshare:   find("unshare", false),

		journalctl: find("journalctl", false),
	}
	t.ip6tables = find(strings.TrimSuffix(cfg.Iptables, "iptables")+"ip6tables", false)
	return t, errors.Join(errs...)
}

// checkRootPath checks that only root may change RootPATH's directories: the agent runs what it
// finds there as root.
func checkRootPath(u *runnerUser) error {
	for _, d := range filepath.SplitList(rootPath) {
		if _, err := rootOwned(d, true, u); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("PATH directory %s: %w: the agent runs programs found there as root", d, err)
		}
	}
	return nil
}

// ResolveProgram resolves a program the agent runs as root beside the host's own (its shutdown
// command, the shell of the pre-runner scripts) as Init resolves those: looked up on RootPATH,
// or where an absolute path says, and only if root alone can change it.
func ResolveProgram(name string) (string, error) { return resolveTool(name, nil) }

// resolveTool finds the program name (a name looked up on rootPath, or an absolute path) and
// returns its path once rootOwned has checked it; exec.ErrNotFound (wrapped) when it is not there.
func resolveTool(name string, u *runnerUser) (string, error) {
	candidates := []string{name}
	if !filepath.IsAbs(name) {
		if name == "" || strings.ContainsRune(name, '/') {
			return "", fmt.Errorf("program %q: want a name to look up on %s, or an absolute path", name, rootPath)
		}
		candidates = nil
		for _, d := range filepath.SplitList(rootPath) {
			candidates = append(candidates, filepath.Join(d, name))
		}
	}
	for _, p := range candidates {
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			continue
		}
		if _, err := rootOwned(p, true, u); err != nil {
			return "", fmt.Errorf("program %s: %w: the agent runs it as root", p, err)
		}
		return p, nil
	}
	return "", fmt.Errorf("program %s: not on %s: %w", name, rootPath, exec.ErrNotFound)
}

// rootOwned checks that only root can change what the absolute path p names: every directory
// from / down, p itself, and each link on the way and what it points to, are root's and writable
// by no one else. A directory others may write to is allowed above p where it is sticky (its
// entries stay their owners'), and as p itself unless strictLast (p a directory programs are
// looked up in: anyone could add one). The program p names may be a system account's other than
// the runner user's (systemUIDMax). It returns p resolved.
func rootOwned(p string, strictLast bool, u *runnerUser) (string, error) {
	links := 0
	return walkOwned(p, strictLast, u, &links)
}

func walkOwned(p string, strictLast bool, u *runnerUser, links *int) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%q is not an absolute path", p)
	}
	// Components are taken as the kernel takes them: ".." after a link goes up from where the
	// link led, not from the link (no filepath.Clean first).
	var parts []string
	for _, part := range strings.Split(p, "/") {
		if part != "" && part != "." {
			parts = append(parts, part)
		}
	}
	cur := "/"
	if err := ownedEntry(cur, len(parts) == 0, strictLast, u); err != nil {
		return "", err
	}
	for i, part := range parts {
		if part == ".." {
			cur = filepath.Dir(cur) // checked on the way down
			continue
		}
		next := filepath.Join(cur, part)
		last := i == len(parts)-1
		fi, err := os.Lstat(next)
		if err != nil {
			return "", err
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if *links++; *links > maxLinks {
				return "", fmt.Errorf("%s: more than %d links", p, maxLinks)
			}
			if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != 0 {
				return "", fmt.Errorf("the link %s is not root's", next)
			}
			target, err := os.Readlink(next)
			if err != nil {
				return "", err
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(cur, target)
			}
			if cur, err = walkOwned(target, last && strictLast, u, links); err != nil {
				return "", err
			}
			if last {
				if err := ownedEntry(cur, true, strictLast, u); err != nil {
					return "", err
				}
			}
			continue
		}
		if err := ownedEntry(next, last, strictLast, u); err != nil {
			return "", err
		}
		cur = next
	}
	return cur, nil
}

// ownedEntry checks one resolved entry of rootOwned's walk (last: the path's own).
func ownedEntry(p string, last, strictLast bool, u *runnerUser) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no owner to check", p)
	}
	dir := fi.IsDir()
	switch {
	case st.Uid != 0 && (dir || st.Uid > systemUIDMax || (u != nil && u.owns(int(st.Uid)))):
		return fmt.Errorf("%s is not root's (uid %d)", p, st.Uid)
	case fi.Mode().Perm()&0o022 == 0:
		return nil
	case dir && fi.Mode()&fs.ModeSticky != 0 && (!last || !strictLast):
		return nil
	}
	return fmt.Errorf("%s is writable by others (mode %s)", p, fi.Mode().Perm())
}

// rootCommand is a program the agent runs as root (path, as resolveTools found it), with the
// agent's environment but RootPATH for its PATH.
func rootCommand(ctx context.Context, path string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PATH=") }), "PATH="+rootPath)
	return cmd
}
