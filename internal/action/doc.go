// Package action holds the tests of the GitHub Action as its users run it: action.yml's contract
// with the step binaries (every input and output declared, each one used), scripts/action.sh's
// choice, download, verification and caching of the step binary against a local release server,
// and the example workflows run end to end by act against the local world.
package action
