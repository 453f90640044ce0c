// Command hangar is Hangar's command line. Today it has one command, the action's
// `mode: refresh` step:
//
//	hangar refresh [--stack hangar] [--dry-run false] [--pools a,b]
//
// which invokes the stack's refresh function (package refresh), sets the report output and
// writes the step summary. Inputs come from the action (INPUT_*), HANGAR_* variables or flags;
// run `hangar refresh -h` for them. `hangar help` lists the commands.
package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// command is one of hangar's commands: run gets the arguments after the command's name and
// exits the process itself (step.Main does).
type command struct {
	name, summary string
	run           func(args []string)
}

// commands are hangar's commands, in the order help lists them.
var commands = []command{
	{"refresh", "the action's mode: refresh: invoke the stack's refresh function, report what it did", refreshMain},
}

func main() {
	if code := dispatch(os.Args[1:], commands, os.Stdout, os.Stderr); code >= 0 {
		os.Exit(code)
	}
}

// dispatch runs the command args names, or answers help: it returns the exit code for help,
// a missing or an unknown command, and -1 once a command has run.
func dispatch(args []string, cmds []command, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintf(stderr, "hangar: no command: want one of %s\n\n", names(cmds))
		usage(stderr, cmds)
		return 2
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		usage(stdout, cmds)
		return 0
	}
	for _, c := range cmds {
		if c.name == args[0] {
			c.run(args[1:])
			return -1
		}
	}
	fmt.Fprintf(stderr, "hangar: unknown command %q: want one of %s (hangar help lists them)\n", args[0], names(cmds))
	return 2
}

// usage lists the commands.
func usage(w io.Writer, cmds []command) {
	fmt.Fprintln(w, "usage: hangar <command> [flags]\n\ncommands:")
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "  help       list the commands\n\nhangar <command> -h lists a command's flags.")
}

func names(cmds []command) string {
	out := make([]string, 0, len(cmds)+1)
	for _, c := range cmds {
		out = append(out, c.name)
	}
	return strings.Join(append(out, "help"), ", ")
}
