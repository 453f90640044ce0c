package main

import (
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUIAddr: hangar ui serves a port of the two loopback addresses its page's *.localhost name
// resolves to, and nothing else.
func TestUIAddr(t *testing.T) {
	t.Parallel()
	for addr, port := range map[string]int{"127.0.0.1:0": 0, "[::1]:8080": 8080, "127.0.0.1:http": 80} {
		got, err := loopback(addr)
		require.NoError(t, err, addr)
		require.Equal(t, port, got, addr)
	}
	for _, addr := range []string{"127.0.0.2:0", "0.0.0.0:8080", "10.0.0.1:80", "localhost:0", "[::]:0", "127.0.0.1", "127.0.0.1:nope"} {
		_, err := loopback(addr)
		require.ErrorContains(t, err, "want a loopback address and port, 127.0.0.1:PORT or [::1]:PORT", addr)
	}
}

// TestUIListensOnBothLoopbacks: the page's port is held on 127.0.0.1 and on ::1 (where the
// machine has IPv6), so that no other user's listener takes the address a browser tries first;
// a port whose ::1 another holds is refused.
func TestUIListensOnBothLoopbacks(t *testing.T) {
	t.Parallel()
	lns, err := listenLoopback(0)
	require.NoError(t, err)
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	port := lns[0].Addr().(*net.TCPAddr).Port
	probe, v6err := net.Listen("tcp6", "[::1]:0")
	if v6err != nil {
		require.Len(t, lns, 1, "no IPv6 here: 127.0.0.1 alone")
		return
	}
	_ = probe.Close()
	require.Len(t, lns, 2)
	require.Equal(t, "[::1]:"+strconv.Itoa(port), lns[1].Addr().String(), "the same port on ::1")
	_, err = net.Listen("tcp6", "[::1]:"+strconv.Itoa(port))
	require.Error(t, err, "another listener cannot take the page's port on ::1")

	squatter, err := net.Listen("tcp6", "[::1]:0")
	require.NoError(t, err)
	defer squatter.Close()
	taken := squatter.Addr().(*net.TCPAddr).Port
	if l4, err := net.Listen("tcp4", "127.0.0.1:"+strconv.Itoa(taken)); err == nil {
		_ = l4.Close()
		_, err = listenLoopback(taken)
		require.ErrorContains(t, err, "is taken (by someone who would get the page's token)")
	}
}
