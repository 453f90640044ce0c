package agent

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
	"time"
)

// DefaultMetadataEndpoint is the instance metadata service.
const DefaultMetadataEndpoint = "http://169.254.169.254"

// ProbeCommand is the agent's hidden subcommand that tries to reach an address: the agent runs
// itself with it as the runner user to prove the firewall rule holds (cmd/agent dispatches it).
const ProbeCommand = "probe-connect"

// Probe exit codes.
const (
	probeConnected = 0
	probeBlocked   = 3
	probeError     = 4
)

// ProbeMain tries a TCP connection to addr and returns the process exit status: 0 connected,
// 3 refused or unreachable (what the firewall rule makes of it), 4 anything else.
func ProbeMain(addr string) int {
	conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err == nil {
		_ = conn.Close()
		fmt.Println("connected to", addr)
		return probeConnected
	}
	var nerr net.Error
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) || (errors.As(err, &nerr) && nerr.Timeout()) {
		fmt.Println("blocked:", err)
		return probeBlocked
	}
	fmt.Println("probe failed:", err)
	return probeError
}

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

// blockMetadata installs (once: it is checked first) the owner-match rule that rejects the
// runner user's connections to the metadata endpoint, then proves it by probing the endpoint
// as that user with the agent's own binary. A probe that gets through is an error.
func blockMetadata(ctx context.Context, iptables, self, endpoint string, u *runnerUser) (string, error) {
	ip, port, err := metadataAddr(endpoint)
	if err != nil {
		return "", err
	}
	if ip.To4() == nil && strings.HasSuffix(iptables, "iptables") {
		iptables = strings.TrimSuffix(iptables, "iptables") + "ip6tables"
	}
	rule := metadataRule(u.uid, ip, port)
	if exec.CommandContext(ctx, iptables, append([]string{"-w", "-C"}, rule...)...).Run() != nil { // not there yet
		if out, err := exec.CommandContext(ctx, iptables, append([]string{"-w", "-I"}, rule...)...).CombinedOutput(); err != nil {
			return string(out), fmt.Errorf("install the firewall rule keeping %s off the metadata endpoint (%s %s): %w",
				u.name, iptables, strings.Join(rule, " "), err)
		}
	}
	addr := net.JoinHostPort(ip.String(), port)
	cmd := exec.CommandContext(ctx, self, ProbeCommand, addr)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: u.credential()}
	cmd.Env = u.env()
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), fmt.Errorf("the runner user %s still reaches the metadata endpoint %s despite the firewall rule: refusing to serve runs", u.name, addr)
	case errors.As(err, &exit) && exit.ExitCode() == probeBlocked:
		return fmt.Sprintf("the runner user %s cannot reach the metadata endpoint %s (%s)", u.name, addr, strings.TrimSpace(string(out))), nil
	default:
		return string(out), fmt.Errorf("prove that %s cannot reach the metadata endpoint %s: the probe (%s, run as %s) failed: %w",
			u.name, addr, self, u.name, err)
	}
}

// metadataIPv6 is the metadata service's IPv6 address (reachable when the launch template turns
// the IPv6 endpoint on).
var metadataIPv6 = net.ParseIP("fd00:ec2::254")

// blockMetadataIPv6 adds the same rule for the IPv6 endpoint with ip6tables, when the agent
// guards the default endpoint and ip6tables is on the instance. It cannot be proved where the
// endpoint is off (the default), so a failure is only reported.
func blockMetadataIPv6(ctx context.Context, iptables, endpoint string, u *runnerUser) error {
	if endpoint != DefaultMetadataEndpoint {
		return nil
	}
	ip6tables, found := lookPath(strings.TrimSuffix(iptables, "iptables") + "ip6tables")
	if !found {
		return nil
	}
	rule := metadataRule(u.uid, metadataIPv6, "80")
	if exec.CommandContext(ctx, ip6tables, append([]string{"-w", "-C"}, rule...)...).Run() == nil {
		return nil
	}
	if out, err := exec.CommandContext(ctx, ip6tables, append([]string{"-w", "-I"}, rule...)...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", ip6tables, strings.Join(rule, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// selfPath is the agent's own binary, for the probe.
func selfPath() string {
	p, err := os.Executable()
	if err != nil {
		return os.Args[0]
	}
	return p
}
