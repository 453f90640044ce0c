package host

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"github.com/hangar-ci/hangar/pkg/instance/runas"
)

// DefaultMetadataEndpoint is the instance metadata service.
const DefaultMetadataEndpoint = "http://169.254.169.254"

// metadataAddr returns host:port of a metadata endpoint URL (port 80 when none).
func metadataAddr(endpoint string) (ip net.IP, port string, err error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return nil, "", fmt.Errorf("metadata endpoint %q: want a URL such as %s", endpoint, DefaultMetadataEndpoint)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "80"
	}
	if host == "localhost" {
		host = "127.0.0.1"
	}
	if ip = net.ParseIP(host); ip == nil {
		return nil, "", fmt.Errorf("metadata endpoint %q: want an IP address, not a name", endpoint)
	}
	return ip, port, nil
}

// firewallComment marks the rules the agent adds.
const firewallComment = "hangar: the runner user may not reach instance metadata"

// metadataRule is the iptables rule (without the chain command) that rejects uid's TCP
// connections to the metadata endpoint.
func metadataRule(uid int, ip net.IP, port string) []string {
	return []string{"OUTPUT", "-m", "owner", "--uid-owner", strconv.Itoa(uid), "-d", ip.String(), "-p", "tcp",
		"--dport", port, "-m", "comment", "--comment", firewallComment, "-j", "REJECT"}
}

// metadataCgroupRule is the iptables rule that rejects the TCP connections to the metadata
// endpoint of every process in the cgroup at path (relative to the cgroup2 mount) or below it,
// whatever its uid.
func metadataCgroupRule(path string, ip net.IP, port string) []string {
	return []string{"OUTPUT", "-m", "cgroup", "--path", path, "-d", ip.String(), "-p", "tcp",
		"--dport", port, "-m", "comment", "--comment", firewallComment, "-j", "REJECT"}
}

// ensureRule inserts rule unless it is there already.
func ensureRule(ctx context.Context, iptables string, rule []string) (string, error) {
	if rootCommand(ctx, iptables, append([]string{"-w", "-C"}, rule...)...).Run() == nil {
		return "", nil
	}
	if out, err := rootCommand(ctx, iptables, append([]string{"-w", "-I"}, rule...)...).CombinedOutput(); err != nil {
		return string(out), fmt.Errorf("%s %s: %w", iptables, strings.Join(rule, " "), err)
	}
	return "", nil
}

// blockMetadata installs (once: each is checked first) the rules that reject the connections to
// the metadata endpoint of the jobs cgroup (every process of every run, whatever its uid) and of
// the runner user (a second layer), then proves each with the helper's probe (runas.ProbeCommand): probing as the
// runner user outside the jobs cgroup, and as root inside it. A probe that gets through is an
// error.
func blockMetadata(ctx context.Context, t tools, helper, endpoint string, u *runnerUser, cg *cgroups) (string, error) {
	ip, port, err := metadataAddr(endpoint)
	if err != nil {
		return "", err
	}
	iptables, name := t.iptables, "iptables"
	if ip.To4() == nil {
		iptables, name = t.ip6tables, "ip6tables"
	}
	if iptables == "" {
		return "", fmt.Errorf("keep the runs off the metadata endpoint %s: %s is not on %s", endpoint, name, rootPath)
	}
	for _, rule := range [][]string{metadataCgroupRule(cg.rel, ip, port), metadataRule(u.uid, ip, port)} {
		if out, err := ensureRule(ctx, iptables, rule); err != nil {
			return out, fmt.Errorf("install the firewall rule keeping the runs off the metadata endpoint: %w", err)
		}
	}
	addr := net.JoinHostPort(ip.String(), port)
	asUser, err := probe(ctx, helper, addr, "the runner user "+u.name, &syscall.SysProcAttr{Credential: u.credential()}, u.env())
	if err != nil {
		return asUser, err
	}
	probeCg, err := cg.newRun("probe")
	if err != nil {
		return "", err
	}
	inJobs, err := probe(ctx, helper, addr, "root in the jobs cgroup "+cg.jobs, &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: probeCg.fd()}, nil)
	probeCg.close()
	if rmErr := os.Remove(probeCg.dir); rmErr != nil && err == nil {
		return inJobs, fmt.Errorf("remove the probe's cgroup: %w", rmErr)
	}
	if err != nil {
		return inJobs, err
	}
	return asUser + "; " + inJobs, nil
}

// probe runs the helper's ProbeCommand against addr with attr and says who it could not reach it
// as; reaching it is an error.
func probe(ctx context.Context, helper, addr, who string, attr *syscall.SysProcAttr, env []string) (string, error) {
	cmd := exec.CommandContext(ctx, helper, runas.ProbeCommand, addr)
	cmd.SysProcAttr = attr
	cmd.Env = env
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), fmt.Errorf("%s still reaches the metadata endpoint %s despite the firewall rules: refusing to serve runs", who, addr)
	case errors.As(err, &exit) && exit.ExitCode() == runas.ProbeBlocked:
		return fmt.Sprintf("%s cannot reach the metadata endpoint %s (%s)", who, addr, strings.TrimSpace(string(out))), nil
	default:
		return string(out), fmt.Errorf("prove that %s cannot reach the metadata endpoint %s: the probe (%s) failed: %w", who, addr, helper, err)
	}
}

// metadataIPv6 is the metadata service's IPv6 address (reachable when the launch template turns
// the IPv6 endpoint on).
var metadataIPv6 = net.ParseIP("fd00:ec2::254")

// blockMetadataIPv6 adds the same rules for the IPv6 endpoint with ip6tables, when the agent
// guards the default endpoint and ip6tables is on the instance. They cannot be proved where the
// endpoint is off (the default), so a failure is only reported.
func blockMetadataIPv6(ctx context.Context, ip6tables, endpoint string, u *runnerUser, cg *cgroups) error {
	if endpoint != DefaultMetadataEndpoint || ip6tables == "" {
		return nil
	}
	for _, rule := range [][]string{metadataCgroupRule(cg.rel, metadataIPv6, "80"), metadataRule(u.uid, metadataIPv6, "80")} {
		if out, err := ensureRule(ctx, ip6tables, rule); err != nil {
			return fmt.Errorf("%w: %s", err, strings.TrimSpace(out))
		}
	}
	return nil
}
