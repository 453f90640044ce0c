// Package provision gives a workflow run the instances it asks for and returns once every one
// has a runner registered with the run's label: it claims idle instances from the pool first (in
// parallel, with one registration token written into each claim), creates the rest with one EC2
// Fleet request (writing their items the moment they exist), waits on all agents' signals at
// once, replaces instances that fail, and, if it cannot finish before its deadline, gives back or
// terminates everything it took. It knows nothing of GitHub Actions; cmd/provision maps the
// action's inputs onto Config.
package provision
