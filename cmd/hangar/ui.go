package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
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
			if err := loopback(addr); err != nil {
				return err
			}
			in, err := open(cmd.Context(), g)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("listen on --addr %s: %w", addr, err)
			}
			defer ln.Close()
			// The page's own host name, not the address: a browser would send its cookie to
			// every listener on 127.0.0.1, whatever the port (console.NewHostName).
			host := net.JoinHostPort(console.NewHostName(), strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
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
			return serve(cmd.Context(), ln, c)
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:0", "the loopback address and port to serve on (port 0: any free port)")
	return cmd
}

// loopback refuses an address beyond this machine: the page shows the stack with the
// operator's credentials.
func loopback(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err == nil {
		var ip netip.Addr
		if ip, err = netip.ParseAddr(host); err == nil && !ip.IsLoopback() {
			err = errors.New("not a loopback address")
		}
	}
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	if err != nil {
		return fmt.Errorf("%w: --addr %q: want a loopback address and port, like 127.0.0.1:8080 or [::1]:0 (hangar ui shows the stack with your credentials and no other login, so it never listens beyond this machine)", errBadInput, addr)
	}
	return nil
}

// serve serves c on ln until ctx ends, then lets the pages being written finish.
func serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 2 * time.Minute, IdleTimeout: 2 * time.Minute}
	stopped := make(chan error, 1)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		stopped <- srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve hangar ui: %w", err)
	}
	return <-stopped
}
