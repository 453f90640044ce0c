package runas

import (
	"fmt"
	"io"
)

// Main runs the command named by args[0] with the rest of args, and returns the process exit
// status and true; false (and nothing run) when args names none of the package's commands.
func Main(args []string) (int, bool) {
	if len(args) == 0 {
		return 0, false
	}
	switch {
	case args[0] == ExecCommand:
		return ExecMain(args[1:]), true
	case args[0] == ProbeCommand && len(args) == 2:
		return ProbeMain(args[1]), true
	case args[0] == ClearKeyringsCommand && len(args) == 1:
		return ClearKeyringsMain(), true
	}
	return 0, false
}

// Usage writes the commands Main accepts to w.
func Usage(w io.Writer) {
	fmt.Fprintf(w, "usage: hangar-runas %s --uid N --gid N [--groups N,...] [--user-namespaces] -- command [args]\n", ExecCommand)
	fmt.Fprintf(w, "       hangar-runas %s host:port\n", ProbeCommand)
	fmt.Fprintf(w, "       hangar-runas %s\n", ClearKeyringsCommand)
	fmt.Fprintln(w, "The agent starts it; it is not meant to be run by hand.")
}
