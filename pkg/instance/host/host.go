package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"

	"github.com/hangar-ci/hangar/pkg/contract/pooldoc"
)

// Config is what the host needs to isolate the runner user.
type Config struct {
	// RunAs is the unprivileged user the runner runs as (the pool's runner.user). It may not be
	// root or the agent's own user.
	RunAs string
	// Runner is the pool's runner settings the host honours: Sudo (a root-equivalent group is
	// allowed), UserNamespaces (subordinate ids and user namespaces are), MetadataAccess (no
	// firewall rules) and WritableDirs (swept after every run).
	Runner pooldoc.Runner
	// OwnDirs are the agent's own directories (the runner install, the runs, its state): no
	// directory the runner user may write to may hold them.
	OwnDirs []string
	// TmpDirs are the shared temporary directories cleared of the runner user's files after
	// every run.
	TmpDirs []string
	// MetadataEndpoint is the instance metadata service the runs are kept from (a URL).
	MetadataEndpoint string
	// Iptables is the iptables command that installs the rules keeping them off it.
	Iptables string
	// Docker is the docker command: when it is on the instance, containers, volumes, networks and
	// images a run left are removed after it. Empty or absent: skipped.
	Docker string
	// Helper is the binary that starts the runner's scripts as the runner user, and runs as that
	// user to probe the firewall rules and clear the user's keyrings (package runas): hangar-runas
	// beside the agent's binary by default (cmd/agent/runas), or the agent's binary where there is
	// none (it has the same commands, hidden).
	Helper string
	// CgroupRoot is the cgroup v2 directory delegated to the agent (systemd's Delegate=yes): each
	// run's processes live in <CgroupRoot>/jobs/<run>-<attempt>. Empty: the agent's own cgroup.
	CgroupRoot string
	// SharedKernel says other machines' runs share this kernel (the test bed's simulated
	// instances): the agent then leaves kernel-wide settings as they are, so the kernel itself
	// does not refuse user namespaces to the runner user (the helper's filter still does).
	SharedKernel bool
	// WalkSkip are trees the walks of the file systems leave alone besides the kernel's and the
	// agent's own: a test bed's own tools (its checkout, Go), which its simulated instances would
	// otherwise walk as part of their image. Absolute paths; never set on an instance.
	WalkSkip []string
}

// DefaultTmpDirs are the shared temporary directories a run may leave files in.
// Missing ones are skipped (/var/crash is Ubuntu's, world-writable like the others).
var DefaultTmpDirs = []string{"/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/dev/mqueue", "/var/crash"}

// ApplyDefaults fills every zero field with its default.
func (c *Config) ApplyDefaults() {
	if c.TmpDirs == nil {
		c.TmpDirs = DefaultTmpDirs
	}
	if c.MetadataEndpoint == "" {
		c.MetadataEndpoint = DefaultMetadataEndpoint
	}
	if c.Iptables == "" {
		c.Iptables = "iptables"
	}
	if c.Docker == "" {
		c.Docker = "docker"
	}
	if c.Helper == "" {
		c.Helper = defaultHelper(selfPath())
	}
}

// Validate checks the configuration; messages name the field and the value.
func (c *Config) Validate() error {
	var errs []error
	for _, d := range c.TmpDirs {
		if !filepath.IsAbs(d) || filepath.Clean(d) == "/" {
			errs = append(errs, fmt.Errorf("tmp dir %q: want an absolute path other than /", d))
		}
	}
	for _, d := range c.WalkSkip {
		if !filepath.IsAbs(d) || filepath.Clean(d) == "/" {
			errs = append(errs, fmt.Errorf("walk skip %q: want an absolute path other than /", d))
		}
	}
	if c.CgroupRoot != "" && (!filepath.IsAbs(c.CgroupRoot) || filepath.Clean(c.CgroupRoot) == "/") {
		errs = append(errs, fmt.Errorf("cgroup root %q: want the absolute directory of a cgroup v2 cgroup", c.CgroupRoot))
	}
	if !filepath.IsAbs(c.Helper) {
		errs = append(errs, fmt.Errorf("helper %q: want the absolute path of hangar-runas (cmd/agent/runas) or of the agent's own binary", c.Helper))
	}
	if c.RunAs == "" || c.RunAs == "self" {
		errs = append(errs, fmt.Errorf("run-as %q: want the unprivileged user the runner runs as (the pool's runner.user); the agent's own user may not run jobs", c.RunAs))
	}
	return errors.Join(errs...)
}

// Host is the instance, readied by Init to serve runs one after another.
type Host struct {
	cfg     Config
	log     *slog.Logger
	user    *runnerUser // set by Init
	cgroups *cgroups    // set by Init
	tools   tools       // set by Init: the programs it runs as root
	// sweepDirs are the directories outside the temporary ones swept after every run (set by
	// Init; see findSweepDirs).
	sweepDirs []string
	// walkSkip are the trees the walks leave alone, and dirs every directory the last walk or
	// check saw, with its stamp (checkNoFilesLeft).
	walkSkip []string
	dirs     map[string]stamp
	// escapes are the runner user's processes found outside their run's cgroup since the last
	// Scrub, which then fails: the instance's containment failed.
	escapesMu sync.Mutex
	escapes   []string
}

// New returns the host for cfg (defaults applied, then validated).
func New(cfg Config, log *slog.Logger) (*Host, error) {
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("host config: %w", err)
	}
	if log == nil {
		log = slog.Default()
	}
	return &Host{cfg: cfg, log: log}, nil
}

// Init readies the instance, on every start of the agent: the helper must be root's alone; the
// runner user must exist, be unprivileged and have no subordinate ids (unless the pool allows user
// namespaces); the image must hold what Hangar needs (checkImage, every missing piece named at
// once); the jobs cgroup that contains every run is made; the firewall rules keeping the
// jobs cgroup and the runner user off the metadata endpoint are installed and proved (rules do not
// survive a reboot); at and cron are denied to the runner user; the directories outside its home
// it may write to are found (see findSweepDirs). out is output to report with a failure.
func (h *Host) Init(ctx context.Context) (out string, err error) {
	r := h.cfg.Runner
	if err := checkHelper(h.cfg.Helper); err != nil {
		return "", err
	}
	u, err := lookupRunnerUser(h.cfg.RunAs, r.Sudo)
	if err != nil {
		return "", err
	}
	if err := checkNoLogin(u); err != nil {
		return "", err
	}
	if u.subUIDs, err = checkSubordinateIDs(u, r.UserNamespaces); err != nil {
		return "", err
	}
	root := h.cfg.CgroupRoot
	if root == "" {
		if root, err = defaultCgroupRoot(); err != nil {
			return "", fmt.Errorf("find the agent's cgroup, to contain runs: %w", err)
		}
	}
	// The image's every missing piece is named at once, before anything is changed (and before
	// anything found on root's PATH is run, that PATH is checked).
	if err := checkRootPath(u); err != nil {
		return "", fmt.Errorf("find the programs the agent runs as root: %w", err)
	}
	if err := checkImage(ctx, h.cfg, u, root); err != nil {
		return "", err
	}
	if h.tools, err = resolveTools(h.cfg, u); err != nil {
		return "", fmt.Errorf("find the programs the agent runs as root: %w", err)
	}
	if h.tools.ip6tables == "" && !r.MetadataAccess && h.cfg.MetadataEndpoint == DefaultMetadataEndpoint {
		h.log.Warn("no ip6tables on the instance: the IPv6 metadata endpoint is not closed to the runs (keep it off in the launch template)",
			"path", rootPath)
	}
	if r.UserNamespaces {
		h.log.Warn("the pool lets the runner make user namespaces (runner.userNamespaces): jobs reach the kernel's namespaced interfaces",
			"subordinateUIDs", rangesString(u.subUIDs))
	} else if h.cfg.SharedKernel {
		h.log.Warn("the kernel is shared with other machines' runs: it is left allowing user namespaces (the helper's filter still refuses them)")
	} else if proved, err := refuseUserNamespaces(ctx, h.tools.unshare, u); err != nil {
		return "", err
	} else if !proved {
		h.log.Warn("the kernel refuses user namespaces, unproved: no unshare on the instance", "path", rootPath)
	}
	if h.cfg.SharedKernel {
		h.log.Warn("the kernel is shared with other machines' runs: its core pattern and hard link protection are left as they are")
	} else if err := takeKernel(); err != nil {
		return "", fmt.Errorf("keep cores and others' hard links from the runs: %w", err)
	}
	if err := closeSSH(ctx, h.tools.sshd, h.tools.systemctl, u); err != nil {
		return "", fmt.Errorf("make sshd refuse the runner user: %w", err)
	}
	if err := closePolkit(u); err != nil {
		return "", fmt.Errorf("make polkit refuse the runner user: %w", err)
	}
	if err := maskUserManager(ctx, h.tools.systemctl, u); err != nil {
		return "", err
	}
	cg, err := setupCgroups(root)
	if err != nil {
		return "", fmt.Errorf("contain runs in cgroups: %w", err)
	}
	h.log.Info("runs are contained in cgroups", "jobs", cg.jobs)
	if r.MetadataAccess {
		h.log.Warn("the pool lets the runner user reach instance metadata (runner.metadataAccess): jobs can use the instance role")
	} else if out, err := blockMetadata(ctx, h.tools, h.cfg.Helper, h.cfg.MetadataEndpoint, u, cg); err != nil {
		return out, err
	} else {
		h.log.Info("metadata endpoint closed to the runs", "detail", out)
		if err := blockMetadataIPv6(ctx, h.tools.ip6tables, h.cfg.MetadataEndpoint, u, cg); err != nil {
			h.log.Warn("could not close the IPv6 metadata endpoint to the runs (keep it off in the launch template)", "error", err)
		}
	}
	if err := denyScheduling(u.name); err != nil {
		return "", err
	}
	h.user, h.cgroups = u, cg
	if err := h.findSweepDirs("/"); err != nil {
		return "", fmt.Errorf("find the directories the runner user may write to: %w", err)
	}
	return "", nil
}

// errNotReady is any use of the host before Init succeeded.
var errNotReady = errors.New("the host is not initialised: no runner user or jobs cgroup yet")

// ready reports whether Init has succeeded.
func (h *Host) ready() error {
	if h.user == nil || h.cgroups == nil {
		return errNotReady
	}
	return nil
}

// HardenInstall makes the runner install in dir root's and read-only to everyone else, so that no
// run can change what the next run's runner is made from.
func (h *Host) HardenInstall(dir string) error { return hardenInstall(dir) }

// OpenRun makes (or, for a run the agent resumes, reopens) the cgroup of the run whose
// directories are dir, named after dir's last element. Close the run when done with it; Scrub
// ends it.
func (h *Host) OpenRun(dir string) (*Run, error) {
	if err := h.ready(); err != nil {
		return nil, err
	}
	cg, err := h.cgroups.newRun(filepath.Base(dir))
	if err != nil {
		return nil, err
	}
	return &Run{dirs: runDirsAt(dir), cgroup: cg, user: h.user, helper: h.cfg.Helper, userNamespaces: h.cfg.Runner.UserNamespaces,
		escaped: h.escape}, nil
}

// escape records a process of the runner user found outside its run's cgroup (Run.Strays).
func (h *Host) escape(stray string) {
	h.escapesMu.Lock()
	defer h.escapesMu.Unlock()
	h.escapes = append(h.escapes, stray)
}

// takeEscapes returns and forgets the escapes recorded since the last Scrub.
func (h *Host) takeEscapes() []string {
	h.escapesMu.Lock()
	defer h.escapesMu.Unlock()
	out := h.escapes
	h.escapes = nil
	return out
}
