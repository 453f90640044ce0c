// Command runas is the agent's helper, installed as hangar-runas beside it: the agent starts it
// to start each runner script as the runner user inside the run's cgroup, to probe the metadata
// firewall and to clear the runner user's keyrings (package runas). It links no AWS code, so it
// starts in about 1.2 ms of CPU where the agent's own binary takes some 7 ms of CPU.
//
//	hangar-runas exec-as-runner --uid N --gid N --groups N,... --user-namespaces=false -- script args
//	hangar-runas probe-connect host:port
//	hangar-runas clear-keyrings
package main

import (
	"os"

	"github.com/hangar-ci/hangar/pkg/instance/runas"
)

func main() {
	code, ok := runas.Main(os.Args[1:])
	if !ok {
		runas.Usage(os.Stderr)
		os.Exit(2)
	}
	os.Exit(code)
}
