package runas

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"
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

// probeTimeout bounds the probe's connection attempt; a rule that drops instead of rejecting
// shows as this timeout, and blocks as well.
const probeTimeout = 3 * time.Second

var errProbeTimeout = errors.New("no answer within " + probeTimeout.String())

// ProbeMain tries a TCP connection to addr (ip:port, [ipv6]:port) and returns the process exit
// status: 0 connected, 3 refused, unreachable or unanswered (what the firewall rule makes of it),
// 4 anything else. It connects through the socket calls themselves rather than package net,
// whose initialisation alone costs the helper's every start (each runner script's) more CPU than
// the rest of it.
func ProbeMain(addr string) int {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		fmt.Println("probe failed:", err)
		return ProbeError
	}
	err = connect(ap, probeTimeout)
	switch {
	case err == nil:
		fmt.Println("connected to", addr)
		return ProbeConnected
	case errors.Is(err, unix.ECONNREFUSED), errors.Is(err, unix.EHOSTUNREACH), errors.Is(err, unix.ENETUNREACH),
		errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES), errors.Is(err, errProbeTimeout):
		fmt.Println("blocked:", err)
		return ProbeBlocked
	}
	fmt.Println("probe failed:", err)
	return ProbeError
}

// connect opens a TCP connection to ap within timeout and closes it.
func connect(ap netip.AddrPort, timeout time.Duration) error {
	family, sa := unix.AF_INET6, unix.Sockaddr(&unix.SockaddrInet6{Port: int(ap.Port()), Addr: ap.Addr().As16()})
	if a := ap.Addr().Unmap(); a.Is4() {
		family, sa = unix.AF_INET, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: a.As4()}
	}
	fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer func() { _ = unix.Close(fd) }()
	if err := unix.Connect(fd, sa); !errors.Is(err, unix.EINPROGRESS) {
		return err // nil: connected at once
	}
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return errProbeTimeout
		}
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return fmt.Errorf("poll: %w", err)
		case n == 0:
			return errProbeTimeout
		}
		soErr, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil {
			return fmt.Errorf("getsockopt: %w", err)
		}
		if soErr != 0 {
			return unix.Errno(soErr)
		}
		return nil
	}
}
