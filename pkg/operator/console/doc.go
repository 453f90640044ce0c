// Package console is the web page of `hangar ui`: the operator's views of pkg/operator (pools at
// a glance, each run's instances on a timeline, one instance with its log tail, cost as a chart)
// served to a browser on the operator's own machine.
//
// The pages are rendered on the server by html/template (contextual escaping of everything an
// instance or a job may have written: log tails, reasons, repository names) and carry no script:
// the charts are SVG drawn here. Every response forbids scripts, frames and every origin but its
// own (Content-Security-Policy), and the handler answers only GET, only to the Host it was bound
// to (no DNS rebinding), and only to a browser that presented the token printed at start (other
// users of the machine can reach 127.0.0.1 too). It reads with the operator's credentials and
// changes nothing.
package console
