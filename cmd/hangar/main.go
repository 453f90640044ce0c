// Command hangar is Hangar's command line: the operator's view of a deployed stack, read with
// the operator's own AWS credentials (no server, no other login), and the action's
// `mode: refresh` step.
//
//	hangar status [POOL...]        what every pool holds now
//	hangar runs                    recent runs: instances, outcome, cost
//	hangar instance ID             one instance: its item, signals, log tail, why it ended
//	hangar cost --by KEY           what runs cost, by repository, pool, run or day
//	hangar drain|undrain POOL      close a pool to reuse, or open it again
//	hangar ui                      the same views as a web page on this machine
//	hangar refresh [flags]         the action's mode: refresh (invoke the stack's refresh function)
//	hangar completion SHELL        shell completion
//
// Every command takes --stack (default $HANGAR_STACK, else hangar) and --output table|json, and
// --help. Bad input (an unknown stack, pool or instance, a malformed flag, no credentials) exits 2
// with a message naming the input and the accepted form; a failure on the way exits 1.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// version is set by the build (-X main.version).
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
