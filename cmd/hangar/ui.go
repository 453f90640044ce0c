package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/hangar-ci/hangar/pkg/operator/console"
)

func newUI(g *globals) *cobra.Command {
	var addr string
	cmd := &cobra.Command{
		Use:   "ui",
		Short: "the same views as a web page on this machine: pools, run timelines, instances, cost chart",
		Long: `ui serves the operator's views as a web page on a loopback address of this machine, read with
your AWS credentials when each page loads: pools at a glance, each run's instances on a timeline
(claimed → running → returned or terminated, with the waits), an instance's details with its
agent's log tail, and cost as a chart by repository, pool, run or day.

It prints the page's address, with a token that lets your browser in (other users of this machine
can reach its loopback address too; the token is fresh at each start, and the browser keeps it
as a cookie). The address's host name is random under .localhost, which Chrome, Edge and Firefox
resolve to this machine: the cookie goes to that name alone, never to another listener on
127.0.0.1 (browsers share a host's cookies across its ports). The page reads only, carries no script and loads nothing from elsewhere. It serves
until interrupted (Ctrl-C). With --output json it prints the address as {"stack","url"}.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			port, err := loopback(addr)
			if err != nil {
				return err
			}
			in, err := open(cmd.Context(), g)
			if err != nil {
				return err
			}
			lns, err := listenLoopback(port)
			if err != nil {
				return fmt.Errorf("listen on --addr %s: %w", addr, err)
			}
			defer func() {
				for _, ln := range lns {
					_ = ln.Close()
				}
			}()
			// The page's own host name, not the address: a browser would send its cookie to
			// every listener on 127.0.0.1, whatever the port (console.NewHostName).
			host := net.JoinHostPort(console.NewHostName(), strconv.Itoa(lns[0].Addr().(*net.TCPAddr).Port))
			token := console.NewToken()
			c, err := console.New(in, console.Config{Stack: g.stack, Host: host, Token: token})
			if err != nil {
				return err
			}
			url := fmt.Sprintf("http://%s/?token=%s", host, token)
			if g.output == outputJSON {
				err = writeJSON(cmd.OutOrStdout(), map[string]string{"stack": g.stack, "url": url})
			} else {
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "hangar ui: stack %s at %s\n", g.stack, url)
			}
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.ErrOrStderr(), "hangar ui: open that address in a browser on this machine; Ctrl-C stops it")
			return serve(cmd.Context(), lns, c)
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:0", "the loopback port to serve on, as 127.0.0.1:PORT or [::1]:PORT (port 0: any free port); both addresses are served")
	return cmd
}

// loopback returns the port of addr, refusing an address beyond this machine (the page shows the
// stack with the operator's credentials) or another loopback address than the two a *.localhost
// name resolves to.
func loopback(addr string) (int, error) {
	host, port, err := net.SplitHostPort(addr)
	if err == nil {
		var ip netip.Addr
		if ip, err = netip.ParseAddr(host); err == nil && ip != netip.MustParseAddr("127.0.0.1") && ip != netip.IPv6Loopback() {
			err = errors.New("not 127.0.0.1 or ::1")
		}
	}
	var n int
	if err == nil {
		n, err = net.LookupPort("tcp", port)
	}
	if err != nil {
		return 0, fmt.Errorf("%w: --addr %q: want a loopback address and port, 127.0.0.1:PORT or [::1]:PORT, like 127.0.0.1:8080 (hangar ui shows the stack with your credentials and no other login, so it never listens beyond this machine; it serves both addresses, which its page's name resolves to)", errBadInput, addr)
	}
	return n, nil
}

// portTries bounds the ports listenLoopback tries for one free on both loopback addresses.
const portTries = 10

// listenLoopback listens on port (0: any free one) of both addresses a *.localhost name
// resolves to, 127.0.0.1 and ::1: a browser may try either first, and another user's listener on
// the one left free would be handed the page's token. ::1 is left out on a machine without IPv6,
// where no one can listen on it.
func listenLoopback(port int) ([]net.Listener, error) {
	for range portTries {
		v4, err := net.Listen("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			return nil, err
		}
		p := v4.Addr().(*net.TCPAddr).Port
		v6, err := net.Listen("tcp6", net.JoinHostPort("::1", strconv.Itoa(p)))
		switch {
		case err == nil:
			return []net.Listener{v4, v6}, nil
		case errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.EAFNOSUPPORT):
			return []net.Listener{v4}, nil
		}
		_ = v4.Close()
		if port != 0 {
			return nil, fmt.Errorf("[::1]:%d is taken (by someone who would get the page's token): %w", p, err)
		}
	}
	return nil, fmt.Errorf("no port free on both 127.0.0.1 and ::1 in %d tries", portTries)
}

// serve serves h on lns until ctx ends, then lets the pages being written finish.
func serve(ctx context.Context, lns []net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 2 * time.Minute, IdleTimeout: 2 * time.Minute}
	stopped := make(chan error, 1)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		stopped <- srv.Shutdown(sctx)
	}()
	served := make(chan error, len(lns))
	for _, ln := range lns {
		go func() { served <- srv.Serve(ln) }()
	}
	for range lns {
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve hangar ui: %w", err)
		}
	}
	return <-stopped
}
