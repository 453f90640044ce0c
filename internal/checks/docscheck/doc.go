// Package docscheck holds the tests that keep the README and docs/ true: every path they name
// exists, every make target they name is one, the README's workflows are examples/labels.yml and examples/workflow.yml,
// the README's prerequisites for make demo and make test are what scripts/testbed.sh installs,
// creates and listens on, every action snippet uses only the action's inputs, and the tables of
// action inputs, outputs and agent flags in docs/configuration.md are the code's.
package docscheck
