package runas

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
)

// ProbeCommand tries to reach an address: the agent starts it as the runner user, and as root in
// the jobs cgroup, to prove the metadata firewall rules hold.
const ProbeCommand = "probe-connect"

// Probe exit codes.
const (
	ProbeConnected = 0
	ProbeBlocked   = 3
	ProbeError     = 4
)

// ProbeMain tries a TCP connection to addr and returns the process exit status: 0 connected,
// 3 refused or unreachable (what the firewall rule makes of it), 4 anything else.
func ProbeMain(addr string) int {
	conn, err := net.DialTimeout("tcp", addr, 3*time.Second)
	if err == nil {
		_ = conn.Close()
		fmt.Println("connected to", addr)
		return ProbeConnected
	}
	var nerr net.Error
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) ||
		errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) || (errors.As(err, &nerr) && nerr.Timeout()) {
		fmt.Println("blocked:", err)
		return ProbeBlocked
	}
	fmt.Println("probe failed:", err)
	return ProbeError
}
