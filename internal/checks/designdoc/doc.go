// Package designdoc holds the test that keeps docs/design.md and the code in agreement: the state
// machine, the signals, the item's attributes, the example pool message and pool document, and
// the default timeouts are read from the document and checked against the packages that
// implement them.
package designdoc
