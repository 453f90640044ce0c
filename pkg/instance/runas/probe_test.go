package runas

import (
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProbe: a listening address is reached (exit 0), a closed port is blocked (exit 3, as the
// firewall's reject makes it), over IPv4 and IPv6 loopback; an address that is not ip:port is an
// error (exit 4), not a pass.
func TestProbe(t *testing.T) {
	t.Parallel()
	listen := func(network, addr string) string {
		l, err := net.Listen(network, addr)
		if err != nil {
			return ""
		}
		t.Cleanup(func() { l.Close() })
		return l.Addr().String()
	}
	open4, open6 := listen("tcp4", "127.0.0.1:0"), listen("tcp6", "[::1]:0")
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	require.NoError(t, err)
	refused := l.Addr().String()
	require.NoError(t, l.Close())
	tests := []struct {
		name, addr string
		want       int
	}{
		{"IPv4 listening", open4, ProbeConnected},
		{"IPv6 listening", open6, ProbeConnected},
		{"refused", refused, ProbeBlocked},
		{"a name, not an address", "localhost:80", ProbeError},
		{"no port", "127.0.0.1", ProbeError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.addr == "" {
				t.Skip("no IPv6 loopback here")
			}
			require.Equal(t, tt.want, ProbeMain(tt.addr))
		})
	}
}
